"""The value checks (vmtune/xml/validate.py; issue 25, part 4): the values vmtune reads are checked as
libvirt checks them.

The judge is libvirt itself: ``virsh -c test:///default define`` (libvirt 9.0 here). For a
domain with one value changed to an odd or a wrong one, vmtune refuses (one line, exit 1, nothing
written) exactly when libvirt refuses; where libvirt accepts something odd, vmtune accepts it too.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import vmtune
from fixtures.corpus import EXAMPLE_HOST
from fixtures.virsh import libvirt_accepts, needs_virsh
from vmtune.xml import validate
from vmtune.errors import InvalidInput, VmtuneError

# odd and wrong spellings: what C's strtoul, libvirt's bitmaps and scaled values take or refuse
NUMBERS = ["abc", "0", " 4", "4 ", "+4", "04", "1.5", "-1", "", " ", "0x4", "4294967296", "2", "3", "1", "8", "9"]
LISTS = ["1-x", "", "^0", "0-3,^1", " 1", "1,", "1 , 2", "3-1", "1,,2", ",1", "1-", "-1", "1--3", " 1 - 3",
         "^1-2,0-4", "+1", "01", "16383", "16384", "0", "1", "0-1", "0,2", "2-3", "\t1"]
SIZES = ["1048576", "abc", "0", "-1", "1.5", "+1048576", " 1048576", "0x100000", "99999999999999999999", "2048", "",
         " "]
UNITS = [None, "KiB", "MiB", "GiB", "gb", "E", "bytes", "b", "Q", "k", "KB", "M"]


def domain(vcpus: int = 4, current: str | None = None, vcpu_text: str | None = None, cpuset: str | None = None,
           pins: str = "", iothreads: str = "", cells: str = "", memory: str = "1048576",
           memory_unit: str | None = "KiB", current_memory: str = "", pages: str = "", numatune: str = "") -> str:
    vattrs = (f" current='{current}'" if current is not None else "") + (f" cpuset='{cpuset}'" if cpuset is not None else "")
    unit = f" unit='{memory_unit}'" if memory_unit is not None else ""
    return (f"<domain type='kvm'><name>v</name><memory{unit}>{memory}</memory>{current_memory}"
            f"{pages}<vcpu{vattrs}>{vcpu_text if vcpu_text is not None else vcpus}</vcpu>{iothreads}"
            f"{pins}{numatune}<os><type arch='x86_64' machine='pc'>hvm</type></os>{cells}<devices/></domain>")


def _cells(cpus: list[str], memory: list[str], ids: list[str | None], unit: str | None = None) -> str:
    out = []
    for c, m, i in zip(cpus, memory, ids):
        attrs = (f" id='{i}'" if i is not None else "") + (f" cpus='{c}'" if c is not None else "")
        attrs += f" memory='{m}'" if m is not None else ""
        attrs += f" unit='{unit}'" if unit else ""
        out.append(f"<cell{attrs}/>")
    return f"<cpu><numa>{''.join(out)}</numa></cpu>"


@st.composite
def one_value_changed(draw) -> str:
    """A valid domain with one value changed, drawn from the odd and wrong spellings above."""
    num, lst, size, unit = (st.sampled_from(NUMBERS), st.sampled_from(LISTS), st.sampled_from(SIZES),
                            st.sampled_from(UNITS))
    where = draw(st.sampled_from(["vcpu", "current", "cpuset", "vcpupin", "vcpupin-vcpu", "emulatorpin",
                                  "iothreadpin", "iothreads", "iothreadids", "memory", "memory-unit",
                                  "currentMemory", "cell-id", "cell-cpus", "cell-memory", "cell-unit",
                                  "page-size", "page-unit", "page-nodeset", "memnode", "numatune"]))
    two_cells = _cells(["0-1", "2-3"], ["524288", "524288"], ["0", "1"])
    iot = "<iothreads>2</iothreads>"
    if where == "vcpu":
        return domain(vcpu_text=draw(num))
    if where == "current":
        return domain(current=draw(num))
    if where == "cpuset":
        return domain(cpuset=draw(lst))
    if where == "vcpupin":
        return domain(pins=f"<cputune><vcpupin vcpu='0' cpuset='{draw(lst)}'/></cputune>")
    if where == "vcpupin-vcpu":
        return domain(pins=f"<cputune><vcpupin vcpu='{draw(num)}' cpuset='1'/><vcpupin vcpu='1' cpuset='2'/></cputune>")
    if where == "emulatorpin":
        return domain(pins=f"<cputune><emulatorpin cpuset='{draw(lst)}'/></cputune>")
    if where == "iothreadpin":
        return domain(iothreads=iot, pins=f"<cputune><iothreadpin iothread='{draw(num)}' cpuset='{draw(lst)}'/></cputune>")
    if where == "iothreads":
        return domain(iothreads=f"<iothreads>{draw(num)}</iothreads>")
    if where == "iothreadids":
        ids = "".join(f"<iothread id='{draw(num)}'/>" for _ in range(draw(st.integers(1, 2))))
        return domain(iothreads=f"{iot}<iothreadids>{ids}</iothreadids>")
    if where == "memory":
        return domain(memory=draw(size))
    if where == "memory-unit":
        return domain(memory="1", memory_unit=draw(unit))
    if where == "currentMemory":
        return domain(current_memory=f"<currentMemory unit='KiB'>{draw(size)}</currentMemory>")
    if where == "cell-id":
        return domain(cells=_cells(["0-1", "2-3"], ["524288", "524288"], [draw(st.sampled_from(NUMBERS + [None])),
                                                                          draw(st.sampled_from(NUMBERS + [None]))]))
    if where == "cell-cpus":
        return domain(cells=_cells([draw(st.sampled_from(LISTS + [None])), "2-3"], ["524288", "524288"], ["0", "1"]))
    if where == "cell-memory":
        return domain(cells=_cells(["0-1", "2-3"], [draw(st.sampled_from(SIZES + [None])), "524288"], ["0", "1"]))
    if where == "cell-unit":
        return domain(cells=_cells(["0-1", "2-3"], ["512", "512"], ["0", "1"], draw(unit)))
    if where == "page-size":
        return domain(pages=f"<memoryBacking><hugepages><page size='{draw(size)}'/></hugepages></memoryBacking>")
    if where == "page-unit":
        u = draw(unit)
        return domain(pages=f"<memoryBacking><hugepages><page size='2'{f' unit={chr(39)}{u}{chr(39)}' if u else ''}/>"
                            "</hugepages></memoryBacking>")
    if where == "page-nodeset":
        return domain(cells=two_cells, pages=f"<memoryBacking><hugepages><page size='2048' nodeset='{draw(lst)}'/>"
                                             "</hugepages></memoryBacking>")
    if where == "memnode":
        nodeset = draw(st.sampled_from(["0", None]))
        return domain(cells=two_cells, numatune=f"<numatune><memnode cellid='{draw(num)}' mode='strict'"
                                                f"{'' if nodeset is None else f' nodeset={chr(39)}0{chr(39)}'}/></numatune>")
    return domain(numatune=f"<numatune><memory mode='strict' nodeset='{draw(lst)}'/></numatune>")


def vmtune_accepts(xml: str) -> bool:
    try:
        vmtune.rewrite(xml, EXAMPLE_HOST, "balanced")
    except InvalidInput as exc:
        assert "\n" not in str(exc)
        return False
    except VmtuneError:
        return True  # placement's own word, not the parser's
    return True


@needs_virsh
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(one_value_changed())
def test_vmtune_refuses_exactly_what_libvirt_refuses(xml):
    assert vmtune_accepts(xml) == (libvirt_accepts(xml) is None), (xml, libvirt_accepts(xml))


# -- the issue's cases, one by one ------------------------------------------------------------------------
@pytest.mark.parametrize("xml, words", [
    (domain(vcpu_text="abc"), "<vcpu>: 'abc' is not a whole number"),
    (domain(vcpu_text="0"), "<vcpu>: 0 vCPUs"),
    (domain(vcpus=2, current="8"), "<vcpu current='8'>: more than the 2 vCPUs"),
    (domain(cells=_cells(["0-5"], ["1048576"], ["0"])), "names vCPU 5 of a domain of 4"),
    (domain(pins="<cputune><vcpupin vcpu='0' cpuset='1-x'/></cputune>"), "<vcpupin cpuset='1-x'>: '1-x' is not a CPU list"),
])
@pytest.mark.parametrize("profile", ["balanced", "latency"])
def test_the_issues_values_are_one_line_exit_1(xml, words, profile, tmp_path, capsys):
    from vmtune.cli import main

    (tmp_path / "d.xml").write_text(xml)
    out = tmp_path / "out.xml"
    rc = main(["rewrite", str(tmp_path / "d.xml"), "--host", "examples/hosts/2node-smt.xml", "--profile", profile,
               "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and words in err, err
    assert not out.exists()


@pytest.mark.parametrize("xml", [
    domain(pins="<cputune><vcpupin vcpu='9' cpuset='1'/></cputune>"),  # a pin for a vCPU it does not have
    domain(current="0"),
    domain(cells=_cells([None, "0-3"], ["524288", "524288"], ["0", "1"])),  # a cell without cpus
    domain(cells=_cells(["0-1"], ["524288"], ["0"])),  # vCPUs in no cell, memory that does not add up
    domain(iothreads="<iothreads>1</iothreads><iothreadids><iothread id='3'/><iothread id='5'/></iothreadids>"),
    domain(cpuset=" 1 - 3, ^2,"),
])
def test_what_libvirt_accepts_vmtune_accepts(xml):
    assert vmtune_accepts(xml)


def test_bitmaps_read_as_libvirt_reads_them():
    assert validate.bitmap(" 1 - 3, ^2,", "x") == {1, 3}
    assert validate.bitmap("01", "x") == {1}
    for bad in ("", " ", ",", ",1", "1,,2", "1-", "-1", "+1", "^1-2", "3-1", "16384", "a", "1 2"):
        with pytest.raises(InvalidInput):
            validate.bitmap(bad, "x")
    assert validate.scaled_kib("+1", "GiB", "x") == 1048576 and validate.scaled_kib("1025", "b", "x") == 2


@settings(max_examples=400)
@given(st.text(alphabet="0123456789-,", max_size=14))
@example("16383")
@example("16384")
@example("0-16384")
@example("3-1")
@example("2-2,1")
def test_a_plain_list_reads_as_it_does_with_white_space_before_it(text):
    """White space around a list of numbers and ranges changes nothing, as in libvirt's parser:
    the same ids, or a refusal both ways (ids at and past the limit, a range that runs down)."""
    def read(t):
        try:
            return validate.bitmap(t, "x")
        except InvalidInput:
            return None

    assert read(text) == read(" " + text) == read(text + " ")


@pytest.mark.parametrize("count, ok", [(4096, True), (4097, False), (16384, False)])
def test_one_vcpu_count_limit_for_the_rewriter_the_claims_and_the_hook(count, ok):
    """The <vcpu> count has one limit (validate.MAX_VCPUS): the rewriter's check, a claim and the
    hook's bounds take or refuse the same counts, each in one line."""
    from lxml import etree

    from vmtune.placement import claims
    from vmtune.hook import bounds
    from vmtune.xml.model import Domain

    assert validate.MAX_VCPUS == 4096
    xml = f"<domain type='kvm'><name>big</name><vcpu>{count}</vcpu><memory>1048576</memory></domain>"
    root = etree.fromstring(xml)
    checks = [lambda: validate.check_counts(Domain(root)), lambda: bounds.check(root, 64),
              lambda: claims.read(xml, EXAMPLE_HOST)]
    for check in checks:
        if ok:
            check()
        else:
            with pytest.raises(InvalidInput) as err:
                check()
            assert "\n" not in str(err.value)
