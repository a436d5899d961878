"""The XML declarations (vmtune/xml/model.py): one declaration reads a field and gives the edit that writes it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

import vmtune
from vmtune.xml import edits, model
from vmtune import profiles
from vmtune.host import Host
from vmtune.xml.edits import Set
from vmtune.xml.model import CellRef, Controller, Disk, Domain, Interface, MemoryDevice, Tag
from vmtune.passes import disks

# each view, and the element it is a view of
VIEWS = {Domain: "domain", Disk: "disk", Interface: "interface", Controller: "controller",
         MemoryDevice: "memory", CellRef: "target", Tag: "tune"}
VALUES = {
    model.TEXT: st.text("abcxyz0189-_.:", min_size=1),
    model.INT: st.integers(0, 1 << 40),
    model.DIGITS: st.integers(0, 1 << 20),
    model.CPUSET: st.frozensets(st.integers(0, 300), min_size=1),
    model.YES_NO: st.booleans(),
    model.ON_OFF: st.booleans(),
}
UNITS = ("KiB", "MiB", "GiB", "b", "k", "M", None)


def declared(kind: type) -> list[tuple[type, str, object]]:
    """(view, name, declaration) for every declaration of ``kind`` on the views."""
    return [(view, name, decl) for view in VIEWS for name, decl in vars(view).items() if isinstance(decl, kind)]


PROPS = [(view, name, prop) for view, name, prop in declared(model.Prop)]
PROPS += [(view, f"{name}.at('x1')", keyed.at("x1")) for view, name, keyed in declared(model.Keyed)]
SIZES = declared(model.Size)


def fresh(view: type, inner: str = "") -> model.View:
    tag = VIEWS[view]
    return view(etree.fromstring(f"<root><{tag}>{inner}</{tag}></root>").find(tag))


def nest(path: str, inner: str, attrs: str = "") -> str:
    """``"a/b"`` -> ``<a><b attrs>inner</b></a>``."""
    steps = path.split("/")
    return ("".join(f"<{s}>" for s in steps[:-1]) + f"<{steps[-1]}{attrs}>" + inner
            + "".join(f"</{s}>" for s in reversed(steps)))


def ids(rows) -> list[str]:
    return [f"{view.__name__}.{name}" for view, name, _ in rows]


@pytest.mark.parametrize("view,name,prop", PROPS, ids=ids(PROPS))
@given(data=st.data())
def test_write_then_read(view, name, prop, data):
    """What a declaration's edit writes, the declaration reads back, on a view without the field."""
    value = data.draw(VALUES[prop.conv])
    obj = fresh(view)
    change = edits.apply(prop.edit(obj, value, "why"))
    assert change is not None and change.after == prop.text(value)
    assert prop.get(obj) == value
    if "." not in name:
        assert getattr(obj, name) == value


ATTR_PROPS = [row for row in PROPS if row[2].attr is not None]
TEXT_PROPS = [row for row in PROPS if row[2].attr is None]


@pytest.mark.parametrize("view,name,prop", ATTR_PROPS, ids=ids(ATTR_PROPS))
@given(data=st.data())
def test_none_removes(view, name, prop, data):
    """An edit to None removes the attribute: the declaration reads its default again."""
    obj = fresh(view)
    edits.apply(prop.edit(obj, data.draw(VALUES[prop.conv]), "why"))
    edits.apply(prop.edit(obj, None, "why"))
    assert prop.get(obj) == prop.default


@pytest.mark.parametrize("view,name,prop", TEXT_PROPS, ids=ids(TEXT_PROPS))
@given(data=st.data(), note=st.sampled_from(["<!-- c -->", "<?pi x?>"]), first=st.booleans())
def test_text_written_around_comments(view, name, prop, data, note, first):
    """A text value with a comment or PI in it is replaced whole, as libvirt reads it; the comment
    or PI stays."""
    value = data.draw(VALUES[prop.conv])
    obj = fresh(view, nest(prop.elem_path, f"{note}7" if first else f"7{note}"))
    edits.apply(prop.edit(obj, value, "why"))
    assert prop.get(obj) == value
    el = obj.node.find(prop.elem_path)
    assert len(el) == 1 and not isinstance(el[0].tag, str)


@pytest.mark.parametrize("view,name,size", SIZES, ids=ids(SIZES))
@given(kib=st.integers(0, 1 << 40), old=st.integers(0, 1 << 20), unit=st.sampled_from(UNITS))
def test_size_write_then_read(view, name, size, kib, old, unit):
    """A size is written as the number and KiB, whatever unit it had: it reads back as written."""
    obj = fresh(view, nest(size.path, str(old), f" unit='{unit}'" if unit else ""))
    for edit in size.edits(obj, kib, "why"):
        edits.apply(edit)
    assert getattr(obj, name) == kib
    assert obj.node.find(size.path).get("unit") == model.KIB


def test_edit_is_the_set_the_passes_wrote():
    """A declaration's edit is the Set a pass used to spell out, path and text as before."""
    dom = Domain(etree.fromstring("<domain><devices><disk/><interface/></devices></domain>"))
    disk, nic = dom.disks[0], dom.interfaces[0]
    assert Disk.cache.edit(disk, "none", "r") == Set(disk.node, "driver/@cache", "none", "r")
    assert Disk.iothread.edit(disk, 2, "r") == Set(disk.node, "driver/@iothread", "2", "r")
    assert Interface.queues.edit(nic, None, "r") == Set(nic.node, "driver/@queues", None, "r")
    assert Domain.vcpu_cpuset.edit(dom, frozenset({1, 2, 3, 8}), "r") == Set(dom.node, "vcpu/@cpuset", "1-3,8", "r")
    assert Domain.timer_present.at("hpet").edit(dom, False, "r") == Set(
        dom.node, "clock/timer[@name='hpet']/@present", "no", "r")
    assert Domain.hyperv_state.at("relaxed").edit(dom, True, "r") == Set(
        dom.node, "features/hyperv/relaxed/@state", "on", "r")
    assert Domain.memory_kib.edits(dom, 2048, "r") == [Set(dom.node, "memory", "2048", "r"),
                                                       Set(dom.node, "memory/@unit", "KiB", "r")]


@pytest.mark.parametrize("text,value", [("yes", True), ("no", False), ("Yes", None), ("on", None), ("", None)])
def test_yes_no_reads_only_yes_and_no(text, value):
    """yes/no fields read True and False from libvirt's spelling only; anything else is no value."""
    dom = Domain(etree.fromstring(f"<domain><clock><timer name='hpet' present='{text}'/></clock></domain>"))
    assert Domain.timer_present.at("hpet").get(dom) is value


DRIVER_DISKS = """<domain type='kvm'><devices>
  <disk type='file' device='disk'><driver cache='none'/><source file='/a'/><target dev='vda' bus='virtio'/></disk>
  <disk type='network' device='disk'><source protocol='nbd' name='b'/><target dev='vdb' bus='virtio'/></disk>
  <disk type='block' device='disk'><driver cache='writeback'/><source dev='/dev/c'/><target dev='vdc' bus='virtio'/></disk>
</devices></domain>"""


def test_driver_named_only_with_a_driver_edit():
    """A disk's driver is named qemu's when this disk gets a cache or io edit, and only then: not
    because the disk before it got one."""
    prof = replace(profiles.load("latency"), devices_disk_cache="keep", devices_disk_io="native")
    ctx = SimpleNamespace(profile=prof, force_virtio=False)
    dom = Domain(etree.fromstring(DRIVER_DISKS))
    got = [(e.anchor.find("target").get("dev"), e.path, e.value) for e in disks.run(ctx, dom) if isinstance(e, Set)]
    # vda: cache none, so io native, and a name; vdb: no native io over the network, nothing;
    # vdc: writeback keeps the default io, nothing
    assert got == [("vda", "driver/@io", "native"), ("vda", "driver/@name", "qemu")]


@given(listed=st.lists(st.integers(1, 12), unique=True, max_size=6), count=st.integers(0, 10))
def test_iothread_ids_as_libvirt_fills_them(listed, count):
    """A domain has max(<iothreads>, listed) iothreads: the listed ids and the lowest unused of
    1..<iothreads> (libvirt's virDomainIOThreadIDDefArrayInit), whatever the order of the list."""
    body = f"<iothreads>{count}</iothreads>" if count else ""
    body += "<iothreadids>" + "".join(f"<iothread id='{i}'/>" for i in listed) + "</iothreadids>"
    ids = Domain(etree.fromstring(f"<domain>{body}</domain>")).iothread_ids()
    assert len(ids) == max(count, len(listed)) and set(listed) <= set(ids) and ids == sorted(ids)
    added = set(ids) - set(listed)
    unused = [i for i in range(1, count + 1) if i not in listed]
    assert sorted(added) == unused[:len(added)]


def test_partly_listed_iothread_ids_are_filled_in():
    """<iothreads>4</iothreads> with id 2 listed has iothreads 1-4; with id 7 listed, 1-3 and 7."""
    def ids(listed):
        xml = f"<domain><iothreads>4</iothreads><iothreadids><iothread id='{listed}'/></iothreadids></domain>"
        return Domain(etree.fromstring(xml)).iothread_ids()
    assert ids(2) == [1, 2, 3, 4] and ids(7) == [1, 2, 3, 7]


def _insert_by_scan(parent, child) -> None:
    """``edits.insert`` as it was before its shortcut: one scan of every child."""
    def local(tag) -> str:
        return etree.QName(tag).localname if isinstance(tag, str) else ""  # a comment's tag is a function

    order = edits.ORDER.get(local(parent.tag), ())
    name = local(child.tag)
    if name not in order:
        parent.append(child)
        return
    rank, position = order.index(name), None
    for i, existing in enumerate(parent):
        other = local(existing.tag)
        if other in order and order.index(other) <= rank:
            position = i + 1
        elif other in order and position is None and order.index(other) > rank:
            position = i
            break
    parent.append(child) if position is None else parent.insert(position, child)


CPUTUNE_CHILDREN = edits.ORDER["cputune"] + ("unknown", "#comment")


@settings(max_examples=500)
@given(st.lists(st.sampled_from(CPUTUNE_CHILDREN), max_size=8), st.sampled_from(CPUTUNE_CHILDREN))
def test_insert_puts_a_child_where_one_scan_would(children, new):
    """The shortcut for a child that belongs at the end gives the place the full scan gives."""
    def tree():
        root = etree.Element("cputune")
        for tag in children:
            root.append(etree.Comment("c") if tag == "#comment" else etree.Element(tag))
        return root

    def made(tag):
        return etree.Comment("new") if tag == "#comment" else etree.Element(tag, new="1")

    fast, slow = tree(), tree()
    edits.insert(fast, made(new))
    _insert_by_scan(slow, made(new))
    assert etree.tostring(fast) == etree.tostring(slow)


FIND_PATHS = ("cputune", "cputune/vcpupin", "devices/disk/driver", "devices/interface/model", "features/hyperv",
              "os/type", "cpu/topology", "clock/timer", "devices/disk/target", "metadata", "nosuch", "devices/nosuch/x",
              "clock/timer[@name='hpet']", "devices/disk[@device='cdrom']", "cputune/vcpupin[@vcpu='1']",
              "devices/controller[@type='pci']", "timer[@name='rtc']", "disk[@device='a/b']", "./vcpu", "devices//driver", "*", f"metadata/{model.TAG}",
              f"metadata/{{{model.LIBOSINFO_NS}}}libosinfo/{{{model.LIBOSINFO_NS}}}os")


def test_xmltext_find_is_lxmls_find_over_the_corpus():
    """xmltext.find and each (plain tag steps followed in C) find the very nodes lxml's ``find`` and
    ``iterfind`` find, in the same order, from every
    element of every corpus domain, for plain, predicate and wildcard paths alike."""
    from conftest import CORPUS

    from vmtune.xml import xmltext

    paths = sorted((CORPUS / "domains").glob("*.xml"))
    assert paths
    for path in paths:
        for el in etree.fromstring(path.read_bytes()).iter(tag=etree.Element):
            for step in FIND_PATHS:
                assert xmltext.find(el, step) is el.find(step), (path.name, el.tag, step)
                assert list(xmltext.each(el, step)) == list(el.iterfind(step)), (path.name, el.tag, step)


def test_each_element_is_declared_once_and_the_tables_come_from_it():
    """vmtune/xml/elements.py declares each element once; the edits' child order, the keys and the
    record's units are made from it, not kept apart: a unit is a child of <domain> or <devices> in
    libvirt's order there, and no tag has two keys or two child orders."""
    from vmtune.record import unitdiff
    from vmtune.xml import elements, xmlkeys

    assert edits.ORDER is elements.ORDER and xmlkeys.KEYS is elements.KEYS and xmlkeys.SPECIAL is elements.SPECIAL
    assert unitdiff.TUNED is elements.TUNED and unitdiff.TUNED_DEVICES is elements.TUNED_DEVICES
    assert {el.parent for el in elements.ELEMENTS if el.unit} == {"domain", "devices"}
    assert elements.TUNED <= set(elements.ORDER["domain"]) and "devices" in elements.ORDER["domain"]
    for el in elements.ELEMENTS:
        if el.key:
            assert elements.KEYS[el.tag] == el.key
        if el.children:
            assert elements.ORDER[el.tag] == el.children and len(set(el.children)) == len(el.children)
    assert {"disk", "interface"} <= elements.SPECIAL and "vcpupin" in elements.SPECIAL


def test_a_view_names_only_elements_that_xml_elements_declares():
    """A view's Child is checked against vmtune/xml/elements.py when its class is made: an element
    that is not declared (as a child of the step before it) is refused at import, not found empty."""
    from vmtune.xml.model import Child, View

    class Fine(View):
        TAG = "domain"
        pins = Child("cputune", "vcpupin")

    assert Fine(etree.fromstring("<domain><cputune><vcpupin vcpu='0'/></cputune></domain>")).pins.get("vcpu") == "0"
    assert Fine(etree.fromstring("<domain/>")).pins is None
    for tags in (("nosuch",), ("cputune", "memnode"), ("vcpupin",)):
        with pytest.raises((TypeError, RuntimeError)) as info:  # Python 3.11 wraps it in a RuntimeError
            type("Bad", (View,), {"TAG": "domain", "field": Child(*tags)})
        assert "is not declared as a child" in str(info.value.__cause__ or info.value)


TWO_NODE = Path(vmtune.__file__).resolve().parents[1] / "examples" / "hosts" / "2node-smt.xml"
EMULATED_DISKS = """<domain type='kvm'><name>e</name><memory unit='KiB'>1048576</memory><vcpu>2</vcpu>
<os><type arch='x86_64'>hvm</type></os><devices>
  <disk type='file' device='disk'><source file='/a.img'/><target dev='hda' bus='ide' removable='on' rotation_rate='1'/>
    <geometry cyls='16383' heads='16' secs='63' trans='lba'/></disk>
  <disk type='file' device='disk'><source file='/b.img'/><target dev='hdb' bus='ide'/></disk>
</devices></domain>"""


def test_a_disk_moved_to_virtio_loses_the_emulated_buses_attributes_it_has_and_no_others():
    """A disk moved off an emulated bus loses ``removable``, ``rotation_rate`` and the geometry's
    ``trans`` where it has them (each a change with its reason); the pass asks nothing of a disk
    without them (an edit that would change nothing is not made)."""
    result = vmtune.rewrite(EMULATED_DISKS, Host.from_capabilities(TWO_NODE.read_bytes()), "latency", force_virtio=True)
    out = etree.fromstring(result.xml.encode())
    first, second = out.iterfind("devices/disk")
    assert first.find("target").get("bus") == second.find("target").get("bus") == "virtio"
    assert first.find("target").get("removable") is None and first.find("target").get("rotation_rate") is None
    assert first.find("geometry").get("trans") is None
    gone = sorted(c.element.rsplit("@", 1)[1] for c in result.changes if "for emulated buses only" in c.reason)
    assert gone == ["removable", "rotation_rate", "trans"]
    prof = profiles.load("latency")
    ctx = SimpleNamespace(profile=prof, force_virtio=True, guest=None)
    dom = Domain(etree.fromstring(EMULATED_DISKS))
    asked = [(e.anchor.find("target").get("dev"), e.path) for e in disks.run(ctx, dom)
             if isinstance(e, Set) and "emulated buses only" in e.reason]
    assert asked == [("hda", "target/@removable"), ("hda", "target/@rotation_rate"), ("hda", "geometry/@trans")]


@pytest.mark.parametrize("given", ["", "<cpu/>", "<cpu mode='custom'/>", "<cpu mode=''/>",
                                   "<cpu mode='host-passthrough'/><cpu mode='custom'/>"])
@pytest.mark.parametrize("value", [None, "", "custom", "host-passthrough"])
@pytest.mark.parametrize("field", [Domain.cpu_mode, Domain.arch, Disk.type])
def test_a_field_asks_for_no_edit_exactly_where_the_edit_would_change_nothing(given, value, field):
    """``Prop.edits`` is ``[edit]`` where applying the edit changes the domain and ``[]`` where it
    would not (an attribute of the node or of a child already at the value, or absent for None); a
    field further down (``os/type/@arch``) is always asked."""
    import copy

    text = f"<domain><os><type arch='custom'>hvm</type></os>{given}</domain>"
    root = etree.fromstring(text)
    view = Domain(root) if field is not Disk.type else Disk(root.find("os"))
    asked = field.edits(view, value, "test")
    twin = copy.deepcopy(root)
    anchor = twin if field is not Disk.type else twin.find("os")
    changed = edits.applied(field.edit(type(view)(anchor), value, "test")) is not None
    if field is Domain.arch:
        assert len(asked) == 1
    else:
        assert bool(asked) == changed, (given, value)
        assert asked == [] or asked == [field.edit(view, value, "test")]


SCSI_DISKS = """<domain type='kvm'><name>s</name><memory unit='KiB'>1048576</memory><vcpu>2</vcpu>
<os><type arch='x86_64'>hvm</type></os><devices>
  <disk type='file' device='disk'><source file='/a.img'/><target dev='sda' bus='scsi'/>
    <address type='drive' controller='0' bus='0' target='0' unit='0'/></disk>
  <disk type='file' device='disk'><source file='/b.img'/><target dev='sdb' bus='scsi'/>
    <address type='drive' controller='1' bus='0' target='0' unit='0'/></disk>
  <hostdev mode='subsystem' type='scsi'><source><adapter name='scsi_host0'/><address bus='0' target='0' unit='0'/></source>
    <address type='drive' controller='1' bus='0' target='0' unit='1'/></hostdev>
  <controller type='scsi' index='0' model='virtio-scsi'/>
  <controller type='scsi' index='1' model='virtio-scsi'/>
</devices></domain>"""


def test_a_scsi_controller_goes_when_every_device_on_it_moved_to_virtio_and_stays_while_one_is_left():
    """Both SCSI disks move to virtio: controller 0 held only one of them and goes, with its reason;
    controller 1 still holds a SCSI hostdev and stays."""
    result = vmtune.rewrite(SCSI_DISKS, Host.from_capabilities(TWO_NODE.read_bytes()), "latency", force_virtio=True)
    out = etree.fromstring(result.xml.encode())
    assert [d.find("target").get("bus") for d in out.iterfind("devices/disk")] == ["virtio", "virtio"]
    assert [c.get("index") for c in out.iterfind("devices/controller[@type='scsi']")] == ["1"]
    assert [c.reason for c in result.changes if "SCSI controller" in c.reason] == [
        "SCSI controller 0 has no devices left after the move to virtio"]


CPUTUNE_TAGS = ["shares", "period", "quota", "vcpupin", "emulatorpin", "iothreadpin", "vcpusched", "iothreadsched",
                "cachetune", "memorytune", "#comment", "{urn:x}other"]


@given(kids=st.lists(st.sampled_from(CPUTUNE_TAGS), max_size=12),
       tag=st.sampled_from(["vcpupin", "iothreadpin", "vcpusched", "shares", "memorytune"]), n=st.integers(0, 5))
def test_inserting_children_of_one_tag_together_puts_them_where_one_by_one_does(kids, tag, n):
    """``edits.insert_all`` (the pins of a <cputune>, each next one after the one before) leaves the
    children in the order ``edits.insert`` one by one does (each in libvirt's order of children,
    after the last of its rank), whatever children the parent has already."""
    def parent():
        el = etree.Element("cputune")
        for i, kid in enumerate(kids):
            el.append(etree.Comment(str(i)) if kid == "#comment" else etree.Element(kid, {"i": str(i)}))
        return el

    one, together = parent(), parent()
    for k in range(n):
        edits.insert(one, etree.Element(tag, {"new": str(k)}))
    edits.insert_all(together, (etree.Element(tag, {"new": str(k)}) for k in range(n)))
    assert etree.tostring(together) == etree.tostring(one)


def test_a_change_inside_an_element_a_later_pass_replaced_is_named_by_its_path_in_the_domain():
    """Where libvirt maps a disk's queues over iothreads (libvirt 10.0 and QEMU 9.0 or later), the
    iothreads pass puts a new ``<driver>`` in place of the one the disks pass set cache and io on:
    those changes name the driver by its path in the domain as it was when it left
    (``/domain/devices/disk[1]/driver/@cache``), not from the top of what left (``/driver/@cache``).
    So does a change in a unit an edit removes."""
    from vmtune.config import Config

    config = replace(Config(), libvirt_version=(10, 0), qemu_version=(9, 0))
    xml = (Path(vmtune.__file__).resolve().parents[1] / "examples" / "batch-4vcpu.xml").read_bytes()
    result = vmtune.rewrite(xml, Host.from_capabilities(TWO_NODE.read_bytes()), "latency", config=config)
    assert all(c.element.startswith("/domain/") for c in result.changes), [c.element for c in result.changes]
    cache = [c.element for c in result.changes if c.element.endswith("/driver/@cache")]
    assert cache == ["/domain/devices/disk[1]/driver/@cache", "/domain/devices/disk[2]/driver/@cache"]
    root = etree.fromstring("<domain><devices><disk><target dev='a'/></disk></devices></domain>")
    done = [edits.applied(edits.Set(root.find("devices/disk/target"), "@dev", "b", "test"))]
    done.append(edits.applied(edits.Remove(root.find("devices/disk"), "test"), None, done))
    assert [c.element for c in edits.settle(done, root)] == ["/domain/devices/disk/target/@dev", "/domain/devices/disk"]


def test_the_edits_and_the_changes_are_frozen_dataclasses_whatever_fills_their_fields():
    """``Set``, ``Put``, ``Remove`` and ``Change`` fill their fields in one step (edits.py): each
    field is what it was given, positionally or by name, and each stays a frozen dataclass (equal
    and hashed by its fields, ``replace`` and ``asdict`` work, a field cannot be set)."""
    import dataclasses

    el, other = etree.Element("a"), etree.Element("b")
    made = [(edits.Set(el, "x/@y", "1", "why"), dict(anchor=el, path="x/@y", value="1", reason="why")),
            (edits.Put(el, other, "why"), dict(parent=el, element=other, reason="why")),
            (edits.Remove(other, "why"), dict(element=other, reason="why")),
            (edits.Change("/domain/x/@y", None, "1", "why"), dict(element="/domain/x/@y", before=None, after="1", reason="why"))]
    for obj, fields in made:
        cls = type(obj)
        assert [getattr(obj, f.name) for f in dataclasses.fields(cls)] == list(fields.values())
        assert cls(**fields) == obj and hash(cls(**fields)) == hash(obj)
        assert dataclasses.replace(obj, reason="other").reason == "other"
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.reason = "no"
    change, fields = made[-1]
    assert dataclasses.asdict(change) == fields == change.to_dict()
