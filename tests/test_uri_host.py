"""The host of a URI (vmtune/live/hostview.py; issue 27, one host per URI): every live command (map,
plan, apply, doctor --connect) takes the host from the URI it was given (vmtune/live/hostview.py
``of``): this machine's sysfs for its system daemon, the host libvirt describes for any other URI,
and never this machine's for another.

libvirt's test driver (``test:///default``: i686, 2 nodes, CPUs 0-7 and 8-15, one running domain
"test") is the other daemon; no libvirtd is needed. Where the test driver stands in for this
machine's system daemon, ``hostview.local_system`` is patched to say so and ``VMTUNE_SYSFS`` names
a sysfs tree (the doctor reads ``--sysfs``, as it always does). The driver's state lives while one
of this process's connections to it is open: the tests that define domains keep one open.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from fixtures.hosttrees import machines, write_sysfs

from vmtune import cli, cpuset
from vmtune.host import Cell, Cpu, Host

libvirt = pytest.importorskip("libvirt", reason="libvirt-python is not installed (scripts/bootstrap --libvirt)")

URI = "test:///default"
DRIVER = {"arch": "i686", "nodes": {"0": "0-7", "1": "8-15"}, "isolated": ""}  # its capabilities
NS = "https://vmtune.dev/xmlns/1"
SKIPPED = "not this machine's system daemon"


@pytest.fixture(autouse=True)
def no_state(no_machine_config, tmp_path_factory, monkeypatch):
    """No hook state and no originals of this machine."""
    empty = tmp_path_factory.mktemp("no-state")
    monkeypatch.setenv("VMTUNE_ORIGINALS_DIR", str(empty / "originals"))
    monkeypatch.setenv("VMTUNE_STATE_DIR", str(empty / "state"))


def run(*argv: str) -> tuple[int, dict]:
    """``vmtune ARGV --json``: exit code and the JSON (without capsys: hypothesis calls it too)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main([*argv, "--json"])
    assert "Traceback" not in err.getvalue()
    assert out.getvalue(), err.getvalue()
    return rc, json.loads(out.getvalue())


def summary(host: Host) -> dict:
    return {"arch": host.arch, "nodes": {str(c.id): cpuset.format(frozenset(c.cpus)) for c in host.cells},
            "isolated": cpuset.format(host.isolated)}


def from_map(data: dict) -> dict:
    nodes = {str(n["id"]): cpuset.format(frozenset(t["id"] for core in n["cores"] for t in core["threads"]
                                                   if t["role"] != "offline")) for n in data["nodes"]}
    return {"arch": data["arch"], "nodes": nodes, "isolated": data["isolcpus"]}


def from_host(data: dict) -> dict | None:
    """The ``host`` the live commands' JSON says they used."""
    return {k: data["host"][k] for k in ("arch", "nodes", "isolated")} if "host" in data else None


def hosts_used(uri: str, doctor_trees: tuple[str, ...] = ()) -> dict[str, dict]:
    """The host each command used for ``uri``: map's model, plan's audit (its nodes, and the host
    it names), apply --dry-run's and doctor's."""
    used = {}
    rc, data = run("map", "--connect", uri)
    assert rc == 0
    used["map"] = from_map(data)
    rc, data = run("plan", "--connect", uri)
    assert rc in (0, 1)
    said = from_host(data) or {}
    # the nodes are those the audit read; the arch and isolcpus those plan says it used
    used["plan"] = {"arch": said.get("arch"), "nodes": {str(n["node"]): n["cpus"] for n in data["nodes"]},
                    "isolated": said.get("isolated")}
    rc, data = run("apply", "--dry-run", "--all", "--connect", uri)
    assert rc == 0
    used["apply --dry-run"] = from_host(data)
    rc, data = run("doctor", "--connect", uri, "--no-measure", *doctor_trees)
    assert rc in (0, 1)
    used["doctor"] = from_host(data)
    return used


def local_system(uri: str) -> bool:
    """The test driver stands in for this machine's system daemon."""
    return True


def two_node_tree(base: str, isolated: frozenset[int] = frozenset({2, 3, 6, 7})) -> str:
    cpus = {c: Cpu(c, c // 4, c // 4, 0, c % 4, frozenset({c})) for c in range(8)}
    cells = tuple(Cell(n, tuple(range(4 * n, 4 * n + 4)), 8 << 20, {2048: 512}) for n in (0, 1))
    return write_sysfs(Host("x86_64", cells, cpus, isolated), base)


# -- another daemon ------------------------------------------------------------------------------------
def test_every_live_command_takes_the_test_drivers_host(tmp_path, monkeypatch):
    """map, plan, apply --dry-run and doctor --connect test:///default all use the test driver's
    host (its capabilities), whatever this machine's sysfs says (VMTUNE_SYSFS here: a tree with
    isolcpus; and the file the old hostview read isolcpus from, for any URI without a host name)."""
    from vmtune.live import hostview

    monkeypatch.setenv("VMTUNE_SYSFS", two_node_tree(str(tmp_path)))
    isolcpus = tmp_path / "isolated"
    isolcpus.write_text("3-5\n")
    monkeypatch.setattr(hostview, "ISOLATED", str(isolcpus), raising=False)
    rc, data = run("plan", "--connect", URI)
    # the first core of each node is the host's (no isolcpus known), not this machine's isolcpus
    assert [(n["node"], n["reserved"]) for n in data["nodes"]] == [(0, "0"), (1, "8")]
    assert data["host"]["from"] == "libvirt" and data["host"]["sysfs"] is None
    used = hosts_used(URI)
    assert used == dict.fromkeys(used, DRIVER)


def test_the_doctor_reads_no_tree_of_this_machine_for_another_daemon():
    """doctor --connect test:///default: every area that reads /sys, /proc or /run says SKIP with one
    reason (and reads nothing); the domains are judged against the test driver's host."""
    from vmtune.doctor import AREAS, area_of, diagnose

    report = diagnose(connect=URI, measure=False)
    assert report.roots.sysfs is None and report.roots.proc is None and report.roots.root is None
    others = {area_of(a) for a in AREAS} - {"domains"}
    skipped = [f for f in report.findings if f.area != "domains"]
    assert {f.area for f in skipped} == others and len(skipped) == len(others)
    assert all(f.level == "SKIP" and f.source == f"--connect {URI}" and f.found.startswith(SKIPPED)
               and "--sysfs/--proc/--root" in f.fix for f in skipped), [f.line() for f in skipped]
    assert not [f for f in report.findings if "/sys" in f.source or "/proc" in f.source]
    (listing,) = [f for f in report.findings if f.area == "domains" and f.level == "INFO"]
    assert "test (untagged, running)" in listing.found and "i686, 2 nodes, CPUs 0-15 (libvirt test:///default)" \
        in listing.found


def _latency(conn, name: str, cpu: int) -> None:
    """A latency-tagged i686 kvm domain pinned to ``cpu`` (the test driver defines any type)."""
    conn.defineXML(f"""<domain type='kvm'><name>{name}</name><memory unit='MiB'>128</memory><vcpu>1</vcpu>
      <metadata><vmtune:tune xmlns:vmtune='{NS}' profile='latency'/></metadata>
      <cputune><vcpupin vcpu='0' cpuset='{cpu}'/></cputune><os><type arch='i686'>hvm</type></os></domain>""")


def problems(doctor: dict) -> set[str]:
    """The audit's problem kinds among the doctor's domains findings (``SOURCE (KIND)``)."""
    return {f["source"].rsplit("(", 1)[1].rstrip(")") for f in doctor["findings"]
            if f["area"] == "domains" and f["source"].endswith(")")}


def test_the_doctor_and_plan_judge_the_domains_alike(tmp_path):
    """Latency domains on the test driver's host: two pinned to its CPU 12, one to its CPU 8 (the
    first core of its node 1: reserved there, not on this machine). plan and doctor --connect find
    the same problems: the overlap on CPU 12 and the domain on a reserved CPU (judged against this
    machine's /sys, the doctor missed the second). Given --sysfs/--proc/--root, the doctor reads
    those trees and still judges the domains against the connection's host."""
    from fixtures import doctortrees

    conn = libvirt.open(URI)  # keeps the driver's state while the commands run
    try:
        _latency(conn, "a", 12)
        _latency(conn, "b", 12)
        _latency(conn, "c", 8)
        rc, plan = run("plan", "--connect", URI)
        assert rc == 1
        kinds = {p["kind"] for p in plan["problems"]}  # and "float": the running "test" floats over them
        assert {"cpu-overlap", "on-reserved"} <= kinds and "hugepages" not in kinds, plan["problems"]
        (overlap,) = [p for p in plan["problems"] if p["kind"] == "cpu-overlap"]
        assert set(overlap["domains"]) == {"a", "b"} and overlap["cpus"] == "12"
        rc, doctor = run("doctor", "--connect", URI, "--no-measure")
        assert rc == 1
        assert problems(doctor) == kinds, doctor["findings"]
        (fail,) = [f for f in doctor["findings"] if f["level"] == "FAIL"]
        assert fail["area"] == "domains" and "(cpu-overlap)" in fail["source"] and "CPU 12" in fail["found"], fail
        assert doctor["host"]["nodes"] == DRIVER["nodes"]

        captured = doctortrees.Tree(tmp_path)
        doctortrees.healthy(tmp_path)
        rc, doctor = run("doctor", "--connect", URI, "--no-measure", *captured.argv())
        assert not [f for f in doctor["findings"] if f["found"].startswith(SKIPPED)]
        assert [f["area"] for f in doctor["findings"] if f["level"] == "FAIL"] == ["domains"]
        assert problems(doctor) == kinds
        assert doctor["host"]["from"] == "libvirt" and doctor["host"]["nodes"] == DRIVER["nodes"]
        assert any(f["area"] == "cpufreq" and f["source"].startswith(str(tmp_path)) for f in doctor["findings"])
    finally:
        conn.close()


def test_apply_places_on_the_uris_host(tmp_path, monkeypatch):
    """apply --dry-run of a 4-vCPU latency domain: on the test driver's host (reserved: CPUs 0 and 8)
    its vCPUs go on one of its nodes; with the test driver standing in for the system daemon, on the
    isolated CPUs of the sysfs tree (2-3 and 6-7 are too few on either node: it does not fit)."""
    from vmtune.live import hostview

    monkeypatch.setenv("VMTUNE_SYSFS", two_node_tree(str(tmp_path), frozenset({2, 3, 4, 5, 6, 7})))
    conn = libvirt.open(URI)
    try:
        conn.defineXML("""<domain type='kvm'><name>k</name><memory unit='MiB'>128</memory><vcpu>4</vcpu>
          <os><type arch='i686'>hvm</type></os></domain>""")
        rc, data = run("apply", "--dry-run", "k", "--profile", "latency", "--connect", URI)
        assert rc == 0
        (row,) = data["domains"]
        pins = set(row["placement"]["vcpupins"].values())
        assert len(pins) == 4 and (pins <= set(range(1, 8)) or pins <= set(range(9, 16))), pins
        monkeypatch.setattr(hostview, "local_system", local_system, raising=False)
        rc, data = run("apply", "--dry-run", "k", "--profile", "latency", "--connect", URI)
        assert rc == 0
        (row,) = data["domains"]
        assert set(row["placement"]["vcpupins"].values()) == {4, 5, 6, 7}, row["placement"]
        assert data["host"]["from"] == "sysfs"
    finally:
        conn.close()


# -- the property: one host per URI, whichever command asks ------------------------------------------------
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines(max_nodes=3, max_cores=2, hybrid=False))
def test_one_host_per_uri_whichever_command_asks(machine):
    """For any sysfs tree as this machine's (VMTUNE_SYSFS; the doctor's --sysfs): map, plan, apply
    --dry-run and doctor use the same host for a URI: the tree's for the system daemon (the test
    driver standing in for it), the test driver's for itself, never the tree's."""
    from vmtune.live import hostview

    host, offline = machine
    with tempfile.TemporaryDirectory() as base:
        sysfs = write_sysfs(host, base, offline)
        with mock.patch.dict(os.environ, {"VMTUNE_SYSFS": sysfs}):
            want = summary(Host.from_sysfs(sysfs))
            with mock.patch.object(hostview, "local_system", local_system, create=True):
                used = hosts_used(URI, ("--sysfs", sysfs))
            assert used == dict.fromkeys(used, want)
            used = hosts_used(URI)
            assert used == dict.fromkeys(used, DRIVER)


@pytest.mark.parametrize("uri, given, want", [
    (None, {}, ("/sys", "/proc", "/")),
    ("qemu:///system", {}, ("/sys", "/proc", "/")),
    ("qemu+unix:///system?socket=/run/other/sock", {}, ("/sys", "/proc", "/")),
    ("test:///default", {}, (None, None, None)),
    ("qemu:///session", {}, (None, None, None)),
    ("qemu+ssh://other/system", {}, (None, None, None)),
    ("qemu+ssh://other/system", {"sysfs": "/cap/sys"}, ("/cap/sys", None, None)),
], ids=["no-connect", "system", "system-socket", "test", "session", "remote", "remote-given-sysfs"])
def test_the_doctors_trees_follow_the_uri(uri, given, want):
    """The doctor reads this machine's trees for its system daemon (or no --connect), none for any
    other URI unless they are given."""
    from vmtune.doctor import trees

    roots = trees(uri, **given)
    assert (roots.sysfs, roots.proc, roots.root) == want
