"""``vmtune map``: the model (every CPU once, every pin on its CPU), its three views, the CLI.

The pins are checked against the XML read here with lxml, not through the model vmtune reads it
with; each CPU's L3 domain and core kind against the Host's, the passthrough devices against a
node-device XML written here. Goldens of the terminal view (no colour) are tests/golden/map/*.txt; regenerate them after an
intended change with ``VMTUNE_REGEN=1 scripts/test tests/test_hostmap.py`` and read the diff.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from conftest import CORPUS, EXAMPLES, ROOT
from fixtures import devtrees
from fixtures.hosttrees import caps_xml, hosts, machines, write_sysfs
from vmtune.placement import holdings
from vmtune.xml.model import Domain
from vmtune import cpuset
from vmtune.cli import main
from vmtune.driver import rewrite
from vmtune.errors import VmtuneError
from vmtune.host import Host, nodedev
from vmtune.hostmap import build, example, names, svg, text
from vmtune.hostmap.build import Role

SCHEMA = json.loads((ROOT / "schemas" / "map.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
GOLDEN = Path(__file__).parent / "golden" / "map"
SVG_NS = "http://www.w3.org/2000/svg"
HOSTS = sorted((CORPUS / "hosts").glob("*.xml")) + [EXAMPLES / "hosts" / "2node-smt.xml"]
AMD = CORPUS / "hosts" / "lv-caps-x86_64-amd-2socket-8die-smt.xml"  # 8 L3 domains of 4 cores, 8 threads
DOMAINS = sorted((CORPUS / "domains").glob("*.xml"))
TAG = "<metadata><vmtune:tune xmlns:vmtune='https://vmtune.dev/xmlns/1' profile='{}'/></metadata>"


# -- what the map must show, read from the XML here ----------------------------------------------------
def expected_pins(xml: str, name: str, on_host: set[int]) -> set[tuple[int, str, str, int | None]]:
    """(CPU, domain, thread, id) of every <vcpupin>, <emulatorpin>, <iothreadpin> whose CPU the
    host has."""
    root = etree.fromstring(xml.encode())
    out = set()
    for el, thread, attr in ((e, "vcpu", "vcpu") for e in root.iterfind("cputune/vcpupin")):
        out |= {(c, name, thread, int(el.get(attr))) for c in cpuset.parse(el.get("cpuset")) if c in on_host}
    for el in root.iterfind("cputune/emulatorpin"):
        out |= {(c, name, "emulator", None) for c in cpuset.parse(el.get("cpuset")) if c in on_host}
    for el in root.iterfind("cputune/iothreadpin"):
        out |= {(c, name, "iothread", int(el.get("iothread"))) for c in cpuset.parse(el.get("cpuset"))
                if c in on_host}
    return out


def check_map(hostmap, host: Host, xmls: list[str]) -> dict:
    """Every host CPU once, every pin on its CPU, the JSON valid, the views well made; the JSON."""
    every = sorted(set(host.cpus) | set(host.offline))
    shown = [c.id for c in hostmap.cpus]
    assert sorted(shown) == every and len(shown) == len(set(shown))
    for cpu in hostmap.cpus:
        assert (cpu.role == Role.OFFLINE) == (cpu.id in host.offline)
    data = hostmap.to_dict()
    VALIDATOR.validate(data)
    found = {(c["id"], p["domain"], p["thread"], p["id"])
             for n in data["nodes"] for core in n["cores"] for c in core["threads"] for p in c["pins"]}
    for xml, dom in zip(xmls, data["domains"]):
        assert expected_pins(xml, dom["name"], set(every)) <= found
    json_ids = [c["id"] for n in data["nodes"] for core in n["cores"] for c in core["threads"]]
    assert sorted(json_ids) == every
    lines = text.render(hostmap)
    if len(every) <= 64:
        assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    check_svg(svg.render(hostmap), hostmap)
    check_l3_and_kinds(hostmap, host, data, lines)
    return data


def check_l3_and_kinds(hostmap, host: Host, data: dict, lines: list[str]) -> None:
    """Every CPU's L3 and kind in the JSON are the host's; each node's L3 domains hold its CPUs of
    them; the terminal names every L3 and marks efficiency cores; the SVG has a box per (node, L3)."""
    for node in data["nodes"]:
        for core in node["cores"]:
            for c in core["threads"]:
                cpu = host.cpus.get(c["id"])
                assert (c["l3"], c["kind"]) == ((cpu.l3, cpu.kind) if cpu else (None, None)), c
        l3s = {x["id"]: cpuset.parse(x["cpus"]) for x in node["l3"]}
        assert l3s == {i: frozenset(c for c in host.cache(i).cpus if host.cpus[c].node == node["id"])
                       for i in {host.l3_of(c) for c in host.cell(node["id"]).cpus} - {None}}
    shown = "\n".join(lines)
    for cache in host.caches:
        assert re.search(rf"^ +L3 {cache.id}: ", shown, re.M), shown
    assert ("( ): an efficiency core" in " ".join(shown.split())) == host.hybrid
    small = {c for c in host.cpus if host.efficient(c)}
    cores = "\n".join(line for line in lines if re.match(r" +[\[(]", line))
    in_parens = {int(i) for block in re.findall(r"\(([^()\[\]]*)\)", cores)
                 for i in re.findall(r"(?<![^\s(])(\d+)[ *!#]", block)}
    assert in_parens == small
    root = etree.fromstring(svg.render(hostmap).encode())
    boxes = [g.get("id") for g in root.iter(f"{{{SVG_NS}}}g") if g.get("class") == "l3"]
    pairs = {(c.node, c.l3) for c in host.cpus.values() if c.l3 is not None}
    assert sorted(boxes) == sorted(f"node{n}-l3-{i}" for n, i in pairs)
    for g in root.iter(f"{{{SVG_NS}}}g"):
        if g.get("id", "").startswith("cpu"):
            cpu = int(g.get("id")[3:])
            assert ("an efficiency core" in g.findtext(f"{{{SVG_NS}}}title")) == (cpu in small)


def check_svg(document: str, hostmap) -> etree._Element:
    root = etree.fromstring(document.encode(), etree.XMLParser(resolve_entities=False, no_network=True))
    assert root.tag == f"{{{SVG_NS}}}svg" and root.getparent() is None
    tags = {etree.QName(el).localname for el in root.iter() if isinstance(el.tag, str)}
    assert not tags & {"script", "foreignObject", "image", "use", "a"}
    for el in root.iter():
        for attr, value in el.attrib.items():
            assert "href" not in attr, (attr, value)
            assert not value.startswith("url(") or value.startswith("url(#"), value
            assert not attr.startswith("on"), attr
    fonts = {el.get("font-family") for el in root.iter() if el.get("font-family")}
    assert fonts <= {"sans-serif", "monospace", "serif"}
    titles = {g.get("id"): g.findtext(f"{{{SVG_NS}}}title") for g in root.iter(f"{{{SVG_NS}}}g") if g.get("id")}
    for cpu in hostmap.cpus:
        tip = titles[f"cpu{cpu.id}"]
        assert tip.startswith(f"CPU {cpu.id}: {cpu.role.value}")
        if cpu.holder is not None:
            assert hostmap.describe(cpu.holder) in tip
    return root


# -- generated hosts and claims ------------------------------------------------------------------------
@st.composite
def pinned_domains(draw, ids: list[int], index: int) -> str:
    """A domain with random pins on ``ids`` (the host's CPUs, offline ones, and one it lacks)."""
    cpus = st.sets(st.sampled_from(ids), min_size=1, max_size=4).map(cpuset.format)
    vcpus = draw(st.integers(1, 6))
    iothreads = draw(st.integers(0, 2))
    tune = [f"<vcpupin vcpu='{v}' cpuset='{draw(cpus)}'/>" for v in range(vcpus) if draw(st.booleans())]
    if draw(st.booleans()):
        tune.append(f"<emulatorpin cpuset='{draw(cpus)}'/>")
    tune += [f"<iothreadpin iothread='{i}' cpuset='{draw(cpus)}'/>" for i in range(1, iothreads + 1)
             if draw(st.booleans())]
    cpuset_attr = f" cpuset='{draw(cpus)}'" if draw(st.booleans()) else ""
    profile = draw(st.sampled_from([None, "latency", "balanced"]))
    name = draw(st.sampled_from([f"vm{index}", f"a-rather-long-domain-name-{index}"]))
    return (f"<domain type='kvm'><name>{name}</name><memory unit='MiB'>512</memory>"
            f"<vcpu placement='static'{cpuset_attr}>{vcpus}</vcpu>"
            + (f"<iothreads>{iothreads}</iothreads>" if iothreads else "")
            + (TAG.format(profile) if profile else "")
            + f"<cputune>{''.join(tune)}</cputune><os><type arch='x86_64'>hvm</type></os></domain>")


def _far(host: Host) -> int:
    """A CPU id the host does not have, online or offline (a pin outside it)."""
    return max(set(host.cpus) | set(host.offline)) + 7


@st.composite
def mapped_hosts(draw):
    host, offline = draw(machines(hybrid=True))
    host = Host.from_capabilities(caps_xml(host, offline)) if draw(st.booleans()) else _with_offline(host, offline)
    ids = sorted(set(host.cpus) | set(host.offline)) + [_far(host)]
    xmls = [draw(pinned_domains(ids, i)) for i in range(draw(st.integers(0, 4)))]
    return host, xmls


def _with_offline(host: Host, offline: dict[int, int]) -> Host:
    with tempfile.TemporaryDirectory() as d:
        return Host.from_sysfs(write_sysfs(host, d, offline), arch=host.arch)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mapped_hosts())
def test_every_cpu_once_and_every_pin_on_its_cpu(case):
    """On generated hosts (sparse node ids, CPU-less nodes, offline CPUs, SMT or not, L3 layouts,
    hybrid or not) with claims pinned at random: every host CPU appears once, in its node, and every
    pin on its CPU; its L3 and kind as the host has them, in every view."""
    host, xmls = case
    hostmap = build.build(host, [(x, "running") for x in xmls])
    check_map(hostmap, host, xmls)
    for node in hostmap.nodes:
        for core in node.cores:
            for cpu in core:
                node_of = host.cpus[cpu.id].node if cpu.id in host.cpus else host.offline[cpu.id]
                assert node_of == node.id
    far = _far(host)
    assert all(far not in c.pins for c in hostmap.cpus)
    for dom in hostmap.domains:
        named = any(far in t.cpus for t in dom.threads)
        assert (far in dom.outside) == named


@pytest.mark.parametrize("path", HOSTS, ids=lambda p: p.stem)
def test_corpus_hosts_with_rewritten_claims(path):
    """Every corpus host, with corpus domains rewritten onto it one after another (latency and
    balanced, each with the claims before it), as vmtune map --claim takes them."""
    host = Host.from_capabilities(path.read_bytes())
    xmls: list[str] = []
    for i, dom in enumerate(DOMAINS):
        try:
            xmls.append(rewrite(dom.read_bytes(), host, ("latency", "balanced")[i % 2], xmls).xml)
        except VmtuneError:
            continue
        if len(xmls) == 6:
            break
    hostmap = build.build(host, [(x, "claim") for x in xmls])
    data = check_map(hostmap, host, xmls)
    dedicated = [c for c in hostmap.cpus if c.role == Role.DEDICATED]
    assert {c.id for c in dedicated} == set().union(*(d.dedicated for d in hostmap.domains)) & set(host.cpus)
    # a dedicated CPU is a vCPU's, or a real-time emulator's or iothread's (a CPU of its own)
    rt = [holdings.rt_helpers(Domain(etree.fromstring(x.encode()))) for x in xmls]
    assert all(c.holder is not None and (c.holder.thread == "vcpu") != (c.id in rt[c.holder.domain])
               for c in dedicated)
    assert len(data["domains"]) == len(xmls)


# -- the views ----------------------------------------------------------------------------------------
def _golden_map(host_path: Path, domains: list[tuple[Path, str]]):
    host = Host.from_capabilities(host_path.read_bytes())
    xmls: list[str] = []
    for path, profile in domains:
        xmls.append(rewrite(path.read_bytes(), host, profile, xmls).xml)
    return build.build(host, [(x, "claim") for x in xmls])


GOLDENS = {
    "2node-smt": (EXAMPLES / "hosts" / "2node-smt.xml",
                  [(EXAMPLES / "stock-latency.xml", "latency"), (EXAMPLES / "db-4vcpu.xml", "latency"),
                   (EXAMPLES / "batch-4vcpu.xml", "balanced")]),
    "4node-nosmt": (CORPUS / "hosts" / "lv-caps-x86_64-4node-hugepages-nosmt.xml",
                    [(EXAMPLES / "db-4vcpu.xml", "latency"), (EXAMPLES / "batch-4vcpu.xml", "throughput")]),
    "amd-8l3": (AMD, [(EXAMPLES / "db-4vcpu.xml", "latency"), (EXAMPLES / "batch-4vcpu.xml", "balanced")]),
}


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_terminal_view_golden(name):
    """The terminal view without colour, on a host with SMT and one without (neither with L3
    banks: their cores as they always were), and on one with 8 L3 domains."""
    hostmap = _golden_map(*GOLDENS[name])
    got = "\n".join(text.render(hostmap, color=False)) + "\n"
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("VMTUNE_REGEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(got)
    assert got == path.read_text()
    assert "\x1b" not in got
    assert hostmap.smt == (name != "4node-nosmt")
    assert ("L3 " in got) == (name == "amd-8l3")


def test_color_only_adds_escapes():
    hostmap = _golden_map(*GOLDENS["2node-smt"])
    plain, coloured = text.render(hostmap), text.render(hostmap, color=True)
    assert any("\x1b[" in line for line in coloured)
    assert [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in coloured] == plain


def test_svg_renders_in_rsvg_convert(tmp_path):
    """The SVG of a map with every role (offline, dedicated, reserved, shared, sibling, isolated,
    free) and an overlap renders in rsvg-convert."""
    exe = shutil.which("rsvg-convert")
    if exe is None:
        if os.geteuid() == 0:
            pytest.fail("rsvg-convert is missing: scripts/setup-libvirt installs librsvg2-bin")
        pytest.skip("rsvg-convert (librsvg2-bin) is not installed; scripts/test installs it as root")
    hostmap = _every_role_map()
    assert {c.role for c in hostmap.cpus} == set(Role)
    document = svg.render(hostmap)
    check_svg(document, hostmap)
    src, png = tmp_path / "map.svg", tmp_path / "map.png"
    src.write_text(document)
    run = subprocess.run([exe, str(src), "-o", str(png)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _every_role_map():
    """Two nodes of 2-thread cores, one CPU offline, isolcpus on one, and domains that hold,
    share and overlap."""
    base = Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
    host = Host.from_capabilities(caps_xml(base, {99: 1}))
    a = ("<domain type='kvm'><name>a</name><memory unit='MiB'>512</memory><vcpu>2</vcpu>"
         + TAG.format("latency") + "<cputune><vcpupin vcpu='0' cpuset='2'/><vcpupin vcpu='1' cpuset='3'/>"
         "<emulatorpin cpuset='0'/></cputune><os><type arch='x86_64'>hvm</type></os></domain>")
    b = ("<domain type='kvm'><name>b</name><memory unit='MiB'>512</memory><vcpu>1</vcpu>"
         + TAG.format("latency") + "<cputune><vcpupin vcpu='0' cpuset='3'/></cputune>"
         "<os><type arch='x86_64'>hvm</type></os></domain>")
    c = ("<domain type='kvm'><name>c</name><memory unit='MiB'>512</memory><vcpu cpuset='4-5'>2</vcpu>"
         "<os><type arch='x86_64'>hvm</type></os></domain>")
    return build.build(host, [(a, "running"), (b, "shut off"), (c, "running")], mode="live",
                       hook=build.HookView(isolated=frozenset({3, 7})))


def test_every_role_and_marks():
    hostmap = _every_role_map()
    by_id = {c.id: c for c in hostmap.cpus}
    assert by_id[99].role == Role.OFFLINE
    assert by_id[2].role == Role.DEDICATED and hostmap.label(by_id[2]) == "a:v0"
    assert "cpu-overlap" in by_id[3].problems and by_id[3].isolated and text.mark(by_id[3]) == "#"
    assert text.mark(by_id[2]) == "!" and not by_id[2].isolated
    assert by_id[18].role == Role.SIBLING  # 2's sibling on the example host
    assert by_id[4].role == Role.SHARED and hostmap.label(by_id[4]) == "c"
    assert by_id[7].role == Role.ISOLATED and by_id[7].isolated and text.mark(by_id[7]) == "*"
    assert by_id[0].role == Role.RESERVED and hostmap.label(by_id[0]) == "host"
    assert [hostmap.describe(p) for p in by_id[0].pins] == ["a emulator"]
    assert not hostmap.domains[1].active
    lines = text.render(hostmap)
    assert any("b (latency, shut off, not running)" in line for line in lines)
    assert "node 1: 16 CPUs (1 offline), 64 GiB memory" in lines
    assert lines[0].endswith("32 CPUs in 16 cores (1 offline), 3 domains")


@given(st.lists(st.text(min_size=1, max_size=20), max_size=12), st.integers(3, 10))
def test_short_names_are_distinct_and_fit(given_names, width):
    labels = names.short(given_names, width)
    assert len(labels) == len(given_names) and len(set(labels)) == len(labels)  # one per domain, same names too
    for name, label in zip(given_names, labels):
        assert len(label) <= width and label.isprintable() and label.isascii() and " " not in label
        assert label not in names.ROLE_WORDS
        if label != name and name.isascii() and name.isprintable() and " " not in name:
            assert label.endswith("~")
    assert names.short(given_names, width) == labels  # the same everywhere


def test_a_domain_named_like_a_role_and_twins(tmp_path):
    """A domain called ``host`` cannot pass for reserved CPUs, and two of one name are told apart."""
    host = Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
    named = ("<domain type='kvm'><name>{}</name><memory unit='MiB'>512</memory><vcpu cpuset='{}'>2</vcpu>"
             "<os><type arch='x86_64'>hvm</type></os></domain>")
    hostmap = build.build(host, [(named.format("host", "6-7"), "running"), (named.format("twin", "4"), "running"),
                                 (named.format("twin", "5"), "running")])
    by_id = {c.id: c for c in hostmap.cpus}
    assert hostmap.label(by_id[6]) == "host1~" and hostmap.label(by_id[0]) == "host"
    assert hostmap.label(by_id[4]) != hostmap.label(by_id[5])
    pins = {c["id"]: c["pins"] for n in hostmap.to_dict()["nodes"] for core in n["cores"] for c in core["threads"]}
    assert {p["index"] for p in pins[4]} == {1} and {p["index"] for p in pins[5]} == {2}


def test_pins_it_cannot_show_are_said(tmp_path):
    """Pins to offline CPUs, to CPUs the host lacks, and for vCPUs the domain lacks: a warning each,
    in every view."""
    base = Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
    host = Host.from_capabilities(caps_xml(base, {40: 0}))
    xml = ("<domain type='kvm'><name>odd</name><memory unit='MiB'>512</memory><vcpu>2</vcpu>" + TAG.format("latency")
           + "<cputune><vcpupin vcpu='0' cpuset='40'/><vcpupin vcpu='1' cpuset='99'/><vcpupin vcpu='7' cpuset='3'/>"
           "</cputune><os><type arch='x86_64'>hvm</type></os></domain>")
    hostmap = build.build(host, [(xml, "running")])
    assert len(hostmap.warnings) == 3
    assert any("40, which are offline" in w for w in hostmap.warnings)
    assert any("99, which this host does not have" in w for w in hostmap.warnings)
    assert any("vCPU 7, which it does not have" in w for w in hostmap.warnings)
    VALIDATOR.validate(hostmap.to_dict())
    assert not {c.id: c for c in hostmap.cpus}[3].pins  # vCPU 7's pin is not drawn
    shown = " ".join(" ".join(text.render(hostmap)).split())
    for warning in hostmap.warnings:
        assert warning in shown
    document = svg.render(hostmap)
    for warning in hostmap.warnings:
        assert warning.replace("<", "&lt;").replace(">", "&gt;") in document


def test_wide_names_keep_to_80_columns():
    host = Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
    name = "服务器" * 13 + " 数据库 " + "x" * 100
    xml = (f"<domain type='kvm'><name>{name}</name><memory unit='MiB'>512</memory><vcpu cpuset='4'>1</vcpu>"
           "<cputune><vcpupin vcpu='0' cpuset='200'/></cputune><os><type arch='x86_64'>hvm</type></os></domain>")
    lines = text.render(build.build(host, [(xml, "running")]))
    assert max(names.columns(line) for line in lines) <= 80
    assert "服务器" in "".join(lines)


def test_example_is_current():
    """docs/map-example.svg, examples/map/*.xml and README's terminal view are what
    scripts/map-example makes now."""
    for path, content in example.files(str(ROOT)).items():
        assert (ROOT / path).read_text() == content, f"{path} is not current: run scripts/map-example"
    assert "<!-- map-example -->\n```text\n$ vmtune map" in (ROOT / "README.md").read_text()


# -- the command line ----------------------------------------------------------------------------------
def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_offline_json_and_svg(capsys, tmp_path):
    host = str(EXAMPLES / "hosts" / "2node-smt.xml")
    claims = [str(ROOT / out) for _, _, out in example.DOMAINS]
    code, out, err = run_cli(capsys, "map", "--host", host, *sum((["--claim", c] for c in claims), []), "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    VALIDATOR.validate(data)
    assert data["mode"] == "offline" and [d["name"] for d in data["domains"]] == ["web-latency", "db", "batch"]
    target = tmp_path / "map.svg"
    code, out, err = run_cli(capsys, "map", "--host", host, "--claim", claims[0], "--svg", str(target))
    assert code == 0 and out == "" and target.read_text().startswith("<?xml")
    code, out, _ = run_cli(capsys, "map", "--host", host, "--svg", "-")
    assert code == 0 and out.startswith("<?xml")


@pytest.mark.parametrize("what,content", [
    ("host", "<capabilities><host>"), ("host", "<domain/>"), ("claim", "<capabilities/>"),
    ("host", (EXAMPLES / "hosts" / "2node-smt.xml").read_text().replace("<cell id='1'>", "<cell id='-1'>")),
    ("host", (EXAMPLES / "hosts" / "2node-smt.xml").read_text().replace(">4096</pages>", ">-5</pages>", 1)),
    ("claim", "<domain><vcpu>x"), ("claim", "<!DOCTYPE d [<!ENTITY e 'x'>]><domain>&e;</domain>")])
def test_cli_bad_input_is_one_line(capsys, tmp_path, what, content):
    bad = tmp_path / "bad.xml"
    bad.write_text(content)
    out_svg = tmp_path / "out.svg"
    argv = ["map", "--host", str(bad)] if what == "host" else [
        "map", "--host", str(EXAMPLES / "hosts" / "2node-smt.xml"), "--claim", str(bad)]
    code, out, err = run_cli(capsys, *argv, "--svg", str(out_svg))
    assert code == 1 and out == ""
    assert err.startswith("vmtune: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert not out_svg.exists()


def test_cli_never_replaces_what_is_not_a_file(capsys, tmp_path):
    """--svg (and rewrite -o) onto a FIFO is refused and leaves it; onto a symlink writes the file
    it points to and keeps the link."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    host = str(EXAMPLES / "hosts" / "2node-smt.xml")
    for argv in (["map", "--host", host, "--svg", str(fifo)],
                 ["rewrite", str(EXAMPLES / "db-4vcpu.xml"), "--host", host, "-o", str(fifo)]):
        code, out, err = run_cli(capsys, *argv)
        assert code == 1 and err.startswith("vmtune: error: ") and "not a regular file" in err, err
        assert fifo.is_fifo()
    target, link = tmp_path / "target.svg", tmp_path / "link.svg"
    target.write_text("old")
    link.symlink_to(target)
    code, _, err = run_cli(capsys, "map", "--host", host, "--svg", str(link))
    assert code == 0, err
    assert link.is_symlink() and target.read_text().startswith("<?xml")


@pytest.mark.parametrize("claim,what", [
    ("<domain type='kvm'><name>vb</name><vcpu>99999999999</vcpu></domain>", ("bad vCPU count", "<vcpu>: ")),
    ("<domain type='kvm'><name>vb</name><vcpu>-3</vcpu></domain>", ("bad vCPU count", "<vcpu>: ")),
    ("<domain type='kvm'><name>io</name><memory>1048576</memory><vcpu>1</vcpu><iothreads>50000000</iothreads>"
     "</domain>",
     ("bad iothread count",))])
def test_cli_counts_no_reader_can_iterate(capsys, tmp_path, claim, what):
    """A claim with a vCPU or iothread count out of bounds is one line, before anything iterates it,
    for the map and for rewrite's --claim and input alike (an input libvirt would refuse says so as
    libvirt's parser does: vmtune/xml/validate.py)."""
    bad = tmp_path / "bad.xml"
    bad.write_text(claim)
    host = str(EXAMPLES / "hosts" / "2node-smt.xml")
    for argv in (["map", "--host", host, "--claim", str(bad)],
                 ["rewrite", str(EXAMPLES / "db-4vcpu.xml"), "--host", host, "--claim", str(bad)],
                 ["rewrite", str(bad), "--host", host]):
        code, out, err = run_cli(capsys, *argv)
        assert code == 1 and any(w in err for w in what) and err.count("\n") == 1, (argv, err)


def test_cli_svg_into_a_missing_folder(capsys, tmp_path):
    code, _, err = run_cli(capsys, "map", "--host", str(EXAMPLES / "hosts" / "2node-smt.xml"),
                           "--svg", str(tmp_path / "nowhere" / "map.svg"))
    assert code == 1 and err.startswith("vmtune: error: ") and err.count("\n") == 1
    assert not (tmp_path / "nowhere").exists()


def test_color_choice(monkeypatch):
    from vmtune.cli import hostmap as cli_map

    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert cli_map.use_color("auto") and cli_map.use_color("always") and not cli_map.use_color("never")
    monkeypatch.setenv("NO_COLOR", "1")
    assert not cli_map.use_color("auto") and cli_map.use_color("always")
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    monkeypatch.delenv("NO_COLOR")
    assert not cli_map.use_color("auto")


# -- live ----------------------------------------------------------------------------------------------
def _live_tree(tmp_path) -> Path:
    """A sysfs tree of the example host with 2M pools, and the hook's state: a lease on CPUs 2-3
    and their isolation."""
    from vmtune.hoststate.document import Isolation, Lease, State
    from vmtune.hoststate.kinds import Irq
    from vmtune.hoststate.record import Record

    host = Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
    sys_root = write_sysfs(host, str(tmp_path))
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    state = State(leases={"0f1e2d3c-4b5a-4697-8877-665544332211": Lease("db", "latency", frozenset({2, 3}), 1.0)},
                  baseline=[], isolation=Isolation(frozenset({2, 3}), records={
                      Irq(5): Record(Irq(5), "0-31", "0-1,4-31")}))
    (state_dir / "state.json").write_text(json.dumps(state.to_json()))
    for cpu, governor in ((2, "performance"), (3, "performance")):  # as the hook left them
        freq = Path(sys_root) / f"devices/system/cpu/cpu{cpu}/cpufreq"
        freq.mkdir(parents=True, exist_ok=True)
        (freq / "scaling_governor").write_text(governor + "\n")
    return Path(sys_root)


def test_live_with_the_hook_state_and_libvirt(capsys, tmp_path, monkeypatch):
    """Live: libvirt's domains (its test driver), the sysfs pools, the hook's lease and isolation,
    and what its CPUs run at.
    (The test driver stands in for this machine's system daemon here, whose host is this machine's
    sysfs; any other URI draws libvirt's host: test_a_connection_to_another_daemon...)"""
    pytest.importorskip("libvirt")
    from vmtune.live import hostview

    monkeypatch.setattr(hostview, "local_system", lambda uri: True)
    sys_root = _live_tree(tmp_path)
    monkeypatch.setenv("VMTUNE_SYSFS", str(sys_root))
    monkeypatch.setenv("VMTUNE_STATE_DIR", str(tmp_path / "state"))
    code, out, err = run_cli(capsys, "map", "-c", "test:///default", "--json")
    assert code == 0, err
    data = json.loads(out)
    VALIDATOR.validate(data)
    assert data["mode"] == "live" and [d["name"] for d in data["domains"]] == ["test"]
    assert data["hook"]["leases"][0]["name"] == "db" and data["hook"]["isolated"] == "2-3"
    assert data["hook"]["moved"] == {"irq": 1}
    cpus = {c["id"]: c for n in data["nodes"] for core in n["cores"] for c in core["threads"]}
    assert cpus[2]["isolated"] and cpus[3]["isolated"] and not cpus[4]["isolated"]
    assert data["warnings"] == []
    code, out, err = run_cli(capsys, "map", "-c", "test:///default", "--color", "never")
    assert code == 0 and "hook: 1 lease: db (latency, CPUs 2-3" in out and "isolated now: CPUs 2-3" in out
    assert "hook power: CPUs 2-3 (db): performance" in out  # each held CPU as sysfs reads it, alike ones together
    assert " 2*^" in out and " 3*^" in out and " 4  " in out  # held, isolated, at performance; not held
    assert "^ the performance governor" in " ".join(out.split())
    assert [(c["cpu"], c["lease"], c["governor"]) for c in data["hook"]["power"]] == [
        (2, "db", "performance"), (3, "db", "performance")]
    code, out, err = run_cli(capsys, "map", "-c", "test:///default", "--svg", "-")
    assert code == 0, err
    picture = etree.fromstring(out.encode())
    cpu = {g.get("id"): g for g in picture.iter(f"{{{SVG_NS}}}g") if (g.get("id") or "").startswith("cpu")}
    said = {k: [t.text for t in g.iter(f"{{{SVG_NS}}}text")][0] for k, g in cpu.items()}
    assert said["cpu2"] == "2*^" and said["cpu3"] == "3*^" and said["cpu4"] == "4", said  # the text view's marks
    tip = next(cpu["cpu2"].iter(f"{{{SVG_NS}}}title")).text
    assert "runs at performance" in tip and "(the hook's lease db)" in tip, tip
    assert "^ v ?" in [t.text for t in picture.iter(f"{{{SVG_NS}}}text")]  # the legend says what the marks are


def test_live_without_libvirt_says_so_once(capsys, tmp_path, monkeypatch):
    sys_root = _live_tree(tmp_path)
    monkeypatch.setenv("VMTUNE_SYSFS", str(sys_root))
    monkeypatch.setenv("VMTUNE_STATE_DIR", str(tmp_path / "nostate"))
    code, out, err = run_cli(capsys, "map", "-c", "qemu+unix:///system?socket=/nonexistent", "--color", "never")
    assert code == 0 and err == ""
    assert " ".join(out.split()).count("the map shows the host without domains") == 1
    assert "domains: none" in out and "node 1: 16 CPUs" in out
    code, out, _ = run_cli(capsys, "map", "-c", "qemu+unix:///system?socket=/nonexistent", "--json")
    data = json.loads(out)
    assert len(data["warnings"]) == 1 and data["hook"] is None and data["domains"] == []
    pools = {(n["id"], p["size_kib"]): p for n in data["nodes"] for p in n["hugepages"]}
    assert pools[(0, 2048)]["total"] == 4096


def test_the_library_entry():
    """``vmtune.host_map`` is the model the CLI draws (docs/library.md, "The map")."""
    import vmtune

    host = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
    xml = vmtune.rewrite((EXAMPLES / "db-4vcpu.xml").read_bytes(), host, profile="latency").xml
    picture = vmtune.host_map(host, [(xml, "running")])
    assert isinstance(picture, vmtune.HostMap)
    assert picture.to_dict() == build.build(host, [(xml, "running")]).to_dict()
    assert {c.id for c in picture.cpus if c.role == Role.DEDICATED} == set(picture.domains[0].dedicated)


# -- passthrough devices -------------------------------------------------------------------------------
NODEDEV = ("<device><name>pci_0000_{bus:02x}_00_0</name><parent>computer</parent><capability type='pci'>"
           "<domain>0</domain><bus>{bus}</bus><slot>0</slot><function>0</function>{numa}</capability></device>")


def _hostdev(bus: int) -> str:
    return (f"<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' "
            f"bus='{bus:#04x}' slot='0x00' function='0x0'/></source></hostdev>")


def _device_case(tmp_path) -> tuple[Path, Path, Path]:
    """The example host (no L3 banks); db1 passes through 0000:3b:00.0 (node 1 by its node-device
    XML), 0000:5e:00.0 (on no node) and 0000:99:00.0 (not on this host); web none."""
    files = []
    for bus, numa in ((0x3b, "<numa node='1'/>"), (0x5e, "<numa node='-1'/>")):
        path = tmp_path / f"pci_{bus:02x}.xml"
        path.write_text(NODEDEV.format(bus=bus, numa=numa))
        files.append(path)
    dom = tmp_path / "db1.xml"
    dom.write_text("<domain type='kvm'><name>db1</name><memory unit='MiB'>512</memory><vcpu>2</vcpu>"
                   + TAG.format("latency") + "<os><type arch='x86_64'>hvm</type></os><devices>"
                   + "".join(_hostdev(b) for b in (0x3b, 0x5e, 0x99)) + "</devices></domain>")
    return dom, files[0], files[1]


def test_passthrough_devices_under_their_node(tmp_path):
    """A PCI device a node-device XML puts on node 1 is under node 1 with its holder, in every view;
    one on no node and one the host lacks are in the host's lists."""
    dom, on_node, nowhere = _device_case(tmp_path)
    base = Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
    host = base.with_devices(nodedev.load([str(on_node), str(nowhere)], frozenset(base.node_ids)))
    web = "<domain type='kvm'><name>web</name><memory unit='MiB'>512</memory><vcpu>1</vcpu></domain>"
    hostmap = build.build(host, [(web, "claim"), (dom.read_text(), "claim")])
    data = check_map(hostmap, host, [web, dom.read_text()])
    assert not data["nodes"][0]["devices"]
    assert [(d["key"], d["domain"], d["index"], d["node"], d["known"]) for d in data["nodes"][1]["devices"]] == [
        ("0000:3b:00.0", "db1", 1, 1, True)]
    assert [(d["key"], d["node"], d["known"]) for d in data["devices"]] == [
        ("0000:5e:00.0", None, True), ("0000:99:00.0", None, False)]
    assert data["devices_known"]
    lines = text.render(hostmap)
    node1, domains = lines.index("node 1: 16 CPUs, 64 GiB memory"), lines.index("domains:")
    assert "  0000:3b:00.0 hostdev -> db1" in lines[node1:domains]
    assert lines[lines.index("devices on no node:") + 1] == "  0000:5e:00.0 hostdev -> db1"
    assert lines[lines.index("devices not on this host:") + 1] == "  0000:99:00.0 hostdev -> db1"
    root = check_svg(svg.render(hostmap), hostmap)
    node_g = {g.get("id"): g for g in root.iter(f"{{{SVG_NS}}}g") if g.get("class") == "node"}
    said = {n: [t.text for t in g.iter(f"{{{SVG_NS}}}text") if t.get("class") == "device"] for n, g in node_g.items()}
    assert said == {"node0": [], "node1": ["0000:3b:00.0 hostdev -> db1"]}
    assert "0000:99:00.0 hostdev -> db1" in "".join(root.itertext())


def test_passthrough_devices_without_a_device_source():
    """A host from capabilities alone knows no device: the map says so, and how to give them."""
    host = Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
    xml = ("<domain type='kvm'><name>db1</name><memory unit='MiB'>512</memory><vcpu>1</vcpu><devices>"
           + _hostdev(0x3b) + "</devices></domain>")
    hostmap = build.build(host, [(xml, "claim")])
    assert [d.known for d in hostmap.devices] == [False] and not hostmap.devices_known
    shown = " ".join(" ".join(text.render(hostmap)).split())
    assert "devices this host does not know (give their `virsh nodedev-dumpxml` with --nodedev): " \
           "0000:3b:00.0 hostdev -> db1" in shown


def test_cli_map_with_nodedev(capsys, tmp_path):
    """``vmtune map --host CAPS --claim DOM --nodedev FILE``: the device under node 1, in the JSON
    and the terminal."""
    dom, on_node, _ = _device_case(tmp_path)
    caps = str(EXAMPLES / "hosts" / "2node-smt.xml")
    argv = ["map", "--host", caps, "--claim", str(dom), "--nodedev", str(on_node)]
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    data = json.loads(out)
    VALIDATOR.validate(data)
    assert [(d["key"], d["domain"]) for d in data["nodes"][1]["devices"]] == [("0000:3b:00.0", "db1")]
    assert {d["key"] for d in data["devices"]} == {"0000:5e:00.0", "0000:99:00.0"}
    code, out, err = run_cli(capsys, *argv, "--color", "never")
    assert code == 0, err
    lines = out.splitlines()
    assert lines.index("  0000:3b:00.0 hostdev -> db1") > lines.index("node 1: 16 CPUs, 64 GiB memory")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_passthrough_capable_device_is_under_its_node_free_or_with_its_holder(data):
    """From sysfs, each PCI device bound to vfio-pci is shown once: under its node (on no node, in
    the host's list), held by the domain that passes it through or free; a device on another
    driver only where a domain holds it; in the JSON, the terminal and the SVG."""
    host = data.draw(hosts(arches=("x86_64",), max_nodes=3, memory_only=False))
    tree = data.draw(devtrees.pci_trees(host.node_ids))
    held = data.draw(st.sets(st.sampled_from([d.address for d in tree.devices])))
    xml = ("<domain type='kvm'><name>vm</name><memory unit='MiB'>512</memory><vcpu>1</vcpu><devices>"
           + "".join(_hostdev(int(a[5:7], 16)) for a in sorted(held)) + "</devices></domain>")
    with tempfile.TemporaryDirectory() as d:
        root = write_sysfs(host, d)
        devtrees.write_sysfs(tree, root)
        loaded = Host.from_sysfs(root, arch="x86_64")
        hostmap = build.build(loaded, [(xml, "claim")])
    out = check_map(hostmap, loaded, [xml])
    shown = [(dev["key"], node["id"], dev["domain"]) for node in out["nodes"] for dev in node["devices"]]
    shown += [(dev["key"], None, dev["domain"]) for dev in out["devices"]]
    nodes = {dev.address: dev.node if dev.node >= 0 else None for dev in tree.devices}
    want = [(a, nodes[a], "vm") for a in held] + [(a, n, None) for a, n in devtrees.assignable(tree).items()
                                                  if a not in held]
    assert sorted(shown, key=str) == sorted(want, key=str)
    lines = text.render(hostmap)
    for key, node, holder in want:
        line = f"  {key} hostdev -> vm" if holder else f"  {key} pci (vfio-pci): free"
        heading = next(i for i, s in enumerate(lines) if s.startswith(f"node {node}:" if node is not None
                                                                      else "devices on no node:"))
        assert line in lines[heading:lines.index("domains:")], (line, lines)
        assert line.strip() in "".join(check_svg(svg.render(hostmap), hostmap).itertext())


def test_a_nodedev_file_given_is_listed_free_with_its_driver(tmp_path, capsys):
    """``--nodedev`` names a device the user means to pass through: one no domain holds is under
    its node, free, with the driver its node device gives (a managed GPU is on its own driver
    while its domain is shut off)."""
    gpu = tmp_path / "gpu.xml"
    gpu.write_text(NODEDEV.format(bus=0x0B, numa="<numa node='1'/>").replace(
        "<parent>computer</parent>", "<parent>computer</parent><driver><name>amdgpu</name></driver>"))
    code, out, err = run_cli(capsys, "map", "--host", str(EXAMPLES / "hosts" / "2node-smt.xml"), "--nodedev", str(gpu),
                             "--json")
    assert code == 0, err
    data = json.loads(out)
    VALIDATOR.validate(data)
    assert [(d["key"], d["domain"], d["index"], d["driver"], d["known"]) for d in data["nodes"][1]["devices"]] == [
        ("0000:0b:00.0", None, None, "amdgpu", True)]
    code, out, err = run_cli(capsys, "map", "--host", str(EXAMPLES / "hosts" / "2node-smt.xml"), "--nodedev", str(gpu))
    lines = out.splitlines()
    assert lines.index("  0000:0b:00.0 pci (amdgpu): free") > lines.index("node 1: 16 CPUs, 64 GiB memory")


def test_l3_domains_in_every_view():
    """The AMD host's 8 L3 domains: a group each under its node in the terminal, a box each in the
    SVG (its title naming its id, size and CPUs), and under its node in the JSON."""
    hostmap = _golden_map(*GOLDENS["amd-8l3"])
    lines = text.render(hostmap)
    heads = [line.strip() for line in lines if line.startswith("  L3 ")]
    assert heads[:2] == ["L3 0: 16 MiB, CPUs 0-3,32-35", "L3 4: 16 MiB, CPUs 4-7,36-39"] and len(heads) == 8
    start = lines.index("  L3 4: 16 MiB, CPUs 4-7,36-39")
    assert lines[start + 1].startswith("    [ 4 ") and lines[start + 1].split()[3] == "36"
    root = check_svg(svg.render(hostmap), hostmap)
    titles = {g.get("id"): g.findtext(f"{{{SVG_NS}}}title") for g in root.iter(f"{{{SVG_NS}}}g")
              if g.get("class") == "l3"}
    assert len(titles) == 8 and titles["node1-l3-8"] == "L3 8: 16 MiB, CPUs 16-19,48-51 (node 1)"
    box = next(g for g in root.iter(f"{{{SVG_NS}}}g") if g.get("id") == "node0-l3-6")
    assert {g.get("id") for g in box.iter(f"{{{SVG_NS}}}g")} - {"node0-l3-6"} == {f"cpu{c}" for c in (*range(8, 12), *range(40, 44))}
    data = hostmap.to_dict()
    assert [x["id"] for x in data["nodes"][0]["l3"]] == [0, 2, 4, 6]
    assert data["nodes"][0]["l3"][0] == {"id": 0, "cpus": "0-3,32-35", "size_kib": 16384, "other_nodes": []}


def test_a_connection_to_another_daemon_draws_that_daemons_host(capsys):
    """Issue 27, one host per URI: ``--connect test:///default`` draws the test driver's host (i686,
    2 nodes, 16 CPUs) and its domain, not this machine's sysfs; ``--sysfs`` beside it is a usage
    error."""
    pytest.importorskip("libvirt")
    code, out, err = run_cli(capsys, "map", "--connect", "test:///default", "--json")
    assert code == 0, err
    drawn = json.loads(out)
    assert drawn["mode"] == "live" and drawn["arch"] == "i686" and len(drawn["nodes"]) == 2
    assert [d["name"] for d in drawn["domains"]] == ["test"]
    with pytest.raises(SystemExit) as exc:
        main(["map", "--connect", "test:///default", "--sysfs", "/sys"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("vmtune: error: map: --connect to another daemon"), err
    assert err.count("\n") == 1
