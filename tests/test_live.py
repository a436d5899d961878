"""vmtune tag / untag / apply / revert / plan (vmtune/live/) against the real libvirtd
(qemu:///system, TCG).

Needs root and libvirt-python (scripts/bootstrap --test installs it as root). The host here has
2 CPUs on one node and the default reserved set is its first core (CPU 0), so one 1-vCPU latency
domain fits (on CPU 1) and a second does not: the tests use 1-vCPU domains, at most one latency
domain placed at a time, and read the chosen CPUs from the JSON output rather than assuming them.
Other sessions' domains share this libvirtd; a test that needs a free dedicated CPU skips, naming
the domains that hold them, when someone else's domain has them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from fixtures.libvirt_env import URI, define, minimal_domain, undefine, virsh
from lxml import etree

import vmtune.config
from vmtune import cli, cpuset

try:
    import libvirt  # noqa: F401
    HAVE_LIBVIRT_PYTHON = True
except ImportError:
    HAVE_LIBVIRT_PYTHON = False
needs_libvirt_python = pytest.mark.skipif(
    not HAVE_LIBVIRT_PYTHON, reason="libvirt-python is not installed (scripts/bootstrap --test as root installs it)")

NS = "https://vmtune.dev/xmlns/1"
ROOT = Path(__file__).resolve().parent.parent
LIBOSINFO = ("<metadata><libosinfo:libosinfo xmlns:libosinfo='http://libosinfo.org/xmlns/libvirt/domain/1.0'>"
             "<libosinfo:os id='http://debian.org/debian/12'/></libosinfo:libosinfo></metadata>")
UNREACHABLE = "qemu+unix:///system?socket=/nonexistent/libvirt-sock"


@pytest.fixture(autouse=True)
def no_machine_config_temp_originals(tmp_path, tmp_path_factory, monkeypatch):
    """No /etc/vmtune of the machine; originals in a temporary folder."""
    empty = tmp_path_factory.mktemp("no-profiles")
    monkeypatch.delenv("VMTUNE_CONFIG", raising=False)
    monkeypatch.setattr(vmtune.config, "DEFAULT_PATH", str(empty / "no-such-vmtune.toml"))
    monkeypatch.setenv("VMTUNE_PROFILES", str(empty))
    monkeypatch.setenv("VMTUNE_ORIGINALS_DIR", str(tmp_path / "originals"))


@pytest.fixture
def live(libvirtd):
    """The real libvirtd, and libvirt-python to talk to it."""
    if not HAVE_LIBVIRT_PYTHON:
        pytest.skip("libvirt-python is not installed (scripts/bootstrap --test as root installs it)")
    return libvirtd


@pytest.fixture
def doms(live):
    """Define test domains through ``doms.define(xml, name=None)``; all are undefined afterwards."""

    class Defined(list):
        def define(self, xml: str, name: str | None = None) -> str:
            self.append(define(xml, name))
            return self[-1]

    made = Defined()
    yield made
    for name in made:
        undefine(name)


def run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys, *argv) -> tuple[int, dict]:
    rc, out, err = run(capsys, *argv, "--json")
    assert "Traceback" not in err
    return rc, json.loads(out)


def one_line_error(rc: int, err: str, want: int, *needles: str) -> None:
    assert rc == want, err
    assert err.startswith("vmtune: error: ") and err.count("\n") == 1, repr(err)
    for needle in needles:
        assert needle in err, err


def inactive(name: str) -> str:
    return virsh("dumpxml", "--inactive", name)


def tree(xml: str) -> etree._Element:
    return etree.fromstring(xml.encode(), etree.XMLParser(remove_blank_text=True))


def vmtune_tag(xml: str) -> str | None:
    el = tree(xml).find(f"metadata/{{{NS}}}tune")
    return None if el is None else el.get("profile")


def free_dedicated_or_skip(count: int = 1) -> None:
    """Skip unless ``count`` CPUs are free for dedicated vCPUs (another session's domains may hold them)."""
    from vmtune.placement.audit import audit
    from vmtune.live import connect, domains, hostview

    with connect.connection(URI) as conn:
        host, every = hostview.of(conn, URI).host, domains.every(conn)
    report = audit(host, [(d.xml, d.state) for d in every])
    free = sum(len(n.free_dedicated) for n in report.nodes)
    if free < count:
        holders = [r.name for r in report.rows if r.dedicated]
        pytest.skip(f"{free} CPU(s) free for dedicated vCPUs on this shared host; held by {holders}")


# -- the pure parts (no libvirtd) ---------------------------------------------------------------------
def test_planner_orders_dedicated_first_then_pinned_node_float():
    """The plan's order depends on the profiles and names only, not on the order given."""
    from vmtune.host import Cell, Cpu, Host
    from vmtune.live import planner

    cpus = {c: Cpu(c, 0, 0, 0, c, frozenset({c})) for c in range(8)}
    host = Host("x86_64", (Cell(0, tuple(range(8)), 16 * 1048576),), cpus)

    def xml(name, pins=""):
        return (minimal_domain(extra=f"<cputune>{pins}</cputune>" if pins else "")
                .replace("<name>x</name>", f"<name>{name}</name>"))

    targets = [planner.Target("1", xml("a"), "balanced"), planner.Target("2", xml("b"), "throughput"),
               planner.Target("3", xml("c", "<vcpupin vcpu='0' cpuset='5'/>"), "balanced"),
               planner.Target("4", xml("d"), "latency"), planner.Target("5", xml("e"), "realtime")]
    want = ["d", "e", "c", "b", "a"]
    for order in (targets, targets[::-1]):
        steps = planner.plan(host, order)
        assert [s.name for s in steps] == want
    # the latency domains kept off the pinned one's CPU 5, the balanced one off theirs
    by_name = {s.name: s.result.placement for s in steps}
    assert 5 not in by_name["d"]["vcpupins"].values() and 5 not in by_name["e"]["vcpupins"].values()
    held = {by_name["d"]["vcpupins"]["0"], by_name["e"]["vcpupins"]["0"]}
    assert not held & cpuset.parse(by_name["a"]["cpuset"])


def test_planner_skips_what_it_cannot_tune_only_when_asked():
    from vmtune.errors import Unsupported
    from vmtune.host import Cell, Cpu, Host
    from vmtune.live import planner

    host = Host("x86_64", (Cell(0, (0, 1), 1048576),), {c: Cpu(c, 0, 0, 0, c, frozenset({c})) for c in (0, 1)})
    arm = planner.Target("1", minimal_domain().replace("<name>x</name>", "<name>arm</name>").replace("x86_64", "aarch64"))
    ok = planner.Target("2", minimal_domain().replace("<name>x</name>", "<name>ok</name>"))
    with pytest.raises(Unsupported, match="^arm: "):
        planner.plan(host, [arm, ok])
    skipped, done = planner.plan(host, [ok, arm], skip_unsupported=True)
    assert (skipped.name, skipped.result, done.name) == ("arm", None, "ok")
    assert "aarch64" in str(skipped.error)


def test_running_domains_hugepages_are_added_back_once():
    """Free pages exclude what running domains hold; apply adds those back before the ledger
    counts every domain's claim, so a running domain's pages count once."""
    from vmtune.host import Cell, Cpu, Host
    from vmtune.live import apply, domains

    host = Host("x86_64", (Cell(0, (0, 1), 4 * 1048576, {2048: 64}),), {c: Cpu(c, 0, 0, 0, c, frozenset({c})) for c in (0, 1)})
    backed = minimal_domain(memory_mib=128, extra=(
        "<memoryBacking><hugepages><page size='2048' unit='KiB'/></hugepages></memoryBacking>"
        "<numatune><memory mode='strict' nodeset='0'/></numatune>"))
    running = domains.Defined("r", "u1", "running", True, backed, backed)
    stopped = domains.Defined("s", "u2", "shut off", True, backed, None)
    assert apply.with_held_pages(host, [running, stopped]).cell(0).pages == {2048: 128}
    assert apply.with_held_pages(host, [stopped]) is host


def test_hostview_is_this_machine(doms):
    """The system daemon's host is this machine's sysfs (``hostview.of``), and the Host libvirt
    describes of it (capabilities + getFreePages, what any other URI's host is) agrees: same CPUs
    and cores, and free (not total) hugepages, while a running guest holds some of them."""
    from vmtune.host import Host
    from vmtune.live import connect, hostview

    free = Host.probe().cells[0].pages.get(2048, 0)
    if free < 64:
        pytest.skip(f"only {free} free 2 MiB hugepages (setup-libvirt reserves 128)")
    name = doms.define(minimal_domain(memory_mib=64, extra=(
        "<memoryBacking><hugepages><page size='2048' unit='KiB'/></hugepages></memoryBacking>")))
    virsh("start", name)
    assert Host.probe().cells[0].pages[2048] <= free - 32  # the guest holds its 32 pages
    for _ in range(3):  # other sessions' guests may take or give back pages between the two reads
        with connect.connection(URI) as conn:
            seen = hostview.host(conn)
        probed = Host.probe()
        if [c.pages for c in seen.cells] == [c.pages for c in probed.cells]:
            break
    assert [c.pages for c in seen.cells] == [c.pages for c in probed.cells]
    assert [(c.id, c.cpus) for c in seen.cells] == [(c.id, c.cpus) for c in probed.cells]
    assert [seen.cores(n) for n in seen.node_ids] == [probed.cores(n) for n in probed.node_ids]
    assert not seen.isolated  # libvirt does not say; nothing of this machine is read for its view
    with connect.connection(URI) as conn:
        system = hostview.of(conn, URI)
    assert system.local and system.sysfs == "/sys" and system.host.isolated == probed.isolated
    assert [(c.id, c.cpus) for c in system.host.cells] == [(c.id, c.cpus) for c in probed.cells]


# -- bad input --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["tag", "{n}", "--profile", "latency"], ["untag", "{n}"], ["apply", "{n}"], ["revert", "{n}"],
    ["apply", "--dry-run", "{n}"],
])
def test_unknown_domain_is_one_line_exit_1(live, capsys, argv):
    name = f"vmtune-test-no-such-{uuid.uuid4().hex[:8]}"
    rc, out, err = run(capsys, *[a.format(n=name) for a in argv])
    one_line_error(rc, err, 1, f"no domain named '{name}'")
    assert out == ""


@pytest.mark.parametrize("argv", [["plan"], ["tag", "x", "--profile", "latency"], ["untag", "x"], ["apply", "--all"],
                                  ["revert", "x"]])
@needs_libvirt_python
def test_unreachable_uri_is_exit_4(capsys, argv):
    rc, out, err = run(capsys, *argv, "--connect", UNREACHABLE)
    one_line_error(rc, err, 4, "cannot connect to libvirt at", "/nonexistent/libvirt-sock")
    assert out == ""


def test_missing_libvirt_python_says_how_to_install(capsys, monkeypatch):
    """Without the libvirt module: exit 4 and, for this checkout's venv, its bootstrap line, for
    every live command."""
    monkeypatch.setitem(sys.modules, "libvirt", None)  # import libvirt raises ImportError
    bootstrap = str(ROOT / "scripts" / "bootstrap")
    for argv in (["plan"], ["tag", "x", "--profile", "latency"], ["apply", "--all"], ["revert", "x"]):
        rc, out, err = run(capsys, *argv)
        one_line_error(rc, err, 4, "libvirt-python is not installed: ", f"{bootstrap} --libvirt")
        assert out == ""


@pytest.mark.parametrize("package, prefix, base, want", [
    # the Debian package: vmtune in Debian's dist-packages
    ("/usr/lib/python3/dist-packages/vmtune", "/usr", "/usr", "apt-get install python3-libvirt"),
    # pip into Debian's python3 itself (no venv): Debian's binding is what that python sees
    ("/usr/local/lib/python3.11/dist-packages/vmtune", "/usr", "/usr", "apt-get install python3-libvirt"),
    # the checkout: its .venv (a wheel or editable install in it), or the source tree itself
    ("{tmp}/co/.venv/lib/python3.11/site-packages/vmtune", "{tmp}/co/.venv", "/usr", "{tmp}/co/scripts/bootstrap --libvirt"),
    ("{tmp}/co/vmtune", "/opt/py", "/opt/py", "{tmp}/co/scripts/bootstrap --libvirt"),
    # pip (a wheel) into any other venv: pip, and what libvirt-python builds against
    ("{tmp}/app/.venv/lib/python3.11/site-packages/vmtune", "{tmp}/app/.venv", "/usr",
     "pip install 'vmtune[libvirt]' (libvirt-python builds against libvirt's headers: libvirt-dev, pkg-config, gcc"),
], ids=["deb", "debian-python", "checkout-venv", "source-tree", "pip-venv"])
def test_the_install_hint_follows_the_install(tmp_path, package, prefix, base, want):
    """How to get libvirt's binding, for the way vmtune was installed (one line each)."""
    from vmtune.live import connect

    (tmp_path / "co" / "scripts").mkdir(parents=True)
    (tmp_path / "co" / "scripts" / "bootstrap").write_text("#!/bin/sh\n")
    (tmp_path / "app").mkdir()
    hint = connect.install_hint(package.format(tmp=tmp_path), prefix.format(tmp=tmp_path), base)
    assert hint.startswith(want.format(tmp=tmp_path)) and "\n" not in hint, hint


def test_usage_errors_exit_2(capsys):
    for argv in (["apply"], ["apply", "x", "--all"], ["apply", "x", "--match", "y*"], ["tag", "x"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 2, argv


# -- tag, untag ---------------------------------------------------------------------------------------------
def test_tag_and_untag_change_only_the_metadata(doms, capsys):
    """tag writes <vmtune:tune profile=...> into the persistent XML and nothing else; untag gives
    back the very XML libvirt had before."""
    name = doms.define(minimal_domain(extra=LIBOSINFO))
    before = inactive(name)
    assert vmtune_tag(before) is None

    rc, out, err = run(capsys, "tag", name, "--profile", "latency")
    assert rc == 0, err
    assert out == f"{name}: tagged latency\n"
    tagged = inactive(name)
    assert vmtune_tag(tagged) == "latency"
    root = tree(tagged)
    root.find("metadata").remove(root.find(f"metadata/{{{NS}}}tune"))
    assert etree.tostring(root, method="c14n") == etree.tostring(tree(before), method="c14n")

    rc, data = run_json(capsys, "tag", name, "--profile", "throughput")
    assert rc == 0 and data["previous"] == "latency" and data["profile"] == "throughput"
    assert vmtune_tag(inactive(name)) == "throughput"

    rc, out, err = run(capsys, "untag", name)
    assert (rc, out) == (0, f"{name}: untagged (was throughput)\n"), err
    assert inactive(name) == before
    rc, out, _ = run(capsys, "untag", name)
    assert (rc, out) == (0, f"{name}: was not tagged\n")
    assert inactive(name) == before


def test_apply_after_a_first_tag_takes_the_domains_own_settings_as_the_users(doms, capsys):
    """A domain with settings an older vmtune also wrote (no balloon), tagged by ``vmtune tag``: the
    tag carries a record of no changes, a retag keeps it so (the new profile), and apply reads the
    domain's settings as the user's, with no "older vmtune" warning."""
    name = doms.define(minimal_domain())  # it has <memballoon model='none'/>
    assert "<memballoon model='none'/>" in inactive(name)
    assert run(capsys, "tag", name, "--profile", "balanced")[0] == 0
    assert run(capsys, "tag", name, "--profile", "latency")[0] == 0
    tag = tree(inactive(name)).find(f"metadata/{{{NS}}}tune")
    (record,) = list(tag)
    data = json.loads(record.text)
    assert tag.get("profile") == "latency" and data["units"] == [] and data["profile"] == "latency"
    rc, out, err = run(capsys, "apply", name, "--dry-run")
    assert rc == 0, err
    assert "older vmtune" not in err and "older vmtune" not in out
    assert "<memballoon model='none'/>" in inactive(name)


def test_untag_leaves_an_empty_metadata_when_the_tag_was_all(doms, capsys):
    """libvirt keeps <metadata/> once its last element goes; the rest is as before."""
    name = doms.define(minimal_domain())
    before = inactive(name)
    assert tree(before).find("metadata") is None
    assert run(capsys, "tag", name, "--profile", "latency")[0] == 0
    assert run(capsys, "untag", name)[0] == 0
    after = tree(inactive(name))
    assert len(after.find("metadata")) == 0
    after.remove(after.find("metadata"))
    assert etree.tostring(after, method="c14n") == etree.tostring(tree(before), method="c14n")


def test_tag_with_an_unknown_profile_changes_nothing(doms, capsys):
    name = doms.define(minimal_domain())
    before = inactive(name)
    rc, out, err = run(capsys, "tag", name, "--profile", "nosuch")
    one_line_error(rc, err, 1, "unknown profile 'nosuch'")
    assert out == ""
    assert inactive(name) == before


def test_tag_of_a_running_domain_is_for_its_next_start(doms, capsys):
    """The tag goes into the persistent definition; the live XML of a running domain keeps none."""
    name = doms.define(minimal_domain())
    virsh("start", name)
    rc, out, err = run(capsys, "tag", name, "--profile", "latency")
    assert out == f"{name}: tagged latency\n"
    assert rc == 0, err
    assert vmtune_tag(inactive(name)) == "latency"
    assert vmtune_tag(virsh("dumpxml", name)) is None


# -- apply, revert --------------------------------------------------------------------------------------------
def test_dry_run_prints_the_diff_and_defines_nothing(doms, capsys, tmp_path):
    name = doms.define(minimal_domain())
    before = inactive(name)
    rc, out, err = run(capsys, "apply", name, "--dry-run", "--profile", "balanced")
    assert rc == 0, err
    assert out.startswith(f"--- {name} (libvirt)\n+++ {name} (vmtune balanced)\n"), out
    assert re.search(r"^\+.*<vmtune:tune .*profile=\"balanced\"", out, re.MULTILINE), out
    assert f"{name}: balanced:" in err and "nothing defined" in err
    assert inactive(name) == before
    assert not (tmp_path / "originals").exists()

    rc, data = run_json(capsys, "apply", name, "--dry-run", "--profile", "balanced")
    (row,) = data["domains"]
    assert rc == 0 and data["dry_run"] and row["changed"] and not row["defined"] and row["diff"].startswith("---")
    assert inactive(name) == before


def test_apply_then_revert_gives_back_the_original_xml(doms, capsys, tmp_path):
    """apply defines the rewritten XML and keeps the one it replaced (0600); revert defines that
    again, and libvirt's XML is then exactly what it was; a second revert has nothing to do."""
    name = doms.define(minimal_domain(extra=LIBOSINFO, devices=(
        "<disk type='file' device='disk'><source file='/var/lib/libvirt/images/vmtune-test-none.img'/>"
        "<target dev='hda' bus='ide'/></disk>"
        "<interface type='user'><mac address='52:54:00:12:34:56'/><model type='e1000'/></interface>")))
    original = inactive(name)
    original_secure = virsh("dumpxml", "--inactive", "--security-info", name)
    uid = virsh("domuuid", name).strip()

    rc, data = run_json(capsys, "apply", name, "--profile", "balanced")
    assert rc == 0
    (row,) = data["domains"]
    assert row["defined"] and row["original_saved"] and row["changes"], row
    tuned = inactive(name)
    assert tuned != original and vmtune_tag(tuned) == "balanced"
    assert tree(tuned).find("devices/disk/target").get("bus") == "virtio"
    kept = tmp_path / "originals" / f"{uid}.xml"
    assert kept.read_text() == original_secure
    assert tree(kept.read_text()).find("devices/disk/target").get("bus") == "ide"
    assert oct(kept.stat().st_mode & 0o777) == "0o600"

    rc, data = run_json(capsys, "apply", name, "--profile", "balanced")  # again: nothing to do
    assert rc == 0 and data["domains"][0]["changed"] is False and data["domains"][0]["defined"] is False

    rc, out, err = run(capsys, "revert", name)
    assert (rc, out) == (0, f"{name}: reverted to the XML it had before vmtune's first apply\n"), err
    assert inactive(name) == original
    assert not kept.exists()
    rc, out, err = run(capsys, "revert", name)
    one_line_error(rc, err, 1, "no original XML")
    assert out == ""
    assert inactive(name) == original


def test_revert_without_a_kept_copy_uses_the_record_in_the_domain(doms, capsys, tmp_path):
    """With the originals store gone (another host, a lost /var/lib/vmtune), revert gives the domain
    back from vmtune's record in its own XML, as libvirt read the original; a retag by hand in
    between (vmtune tag) keeps the record."""
    name = doms.define(minimal_domain(extra=LIBOSINFO, devices=(
        "<disk type='file' device='disk'><source file='/var/lib/libvirt/images/vmtune-test-none.img'/>"
        "<target dev='hda' bus='ide'/></disk>")))
    original = inactive(name)
    rc, _ = run_json(capsys, "apply", name, "--profile", "balanced")
    assert rc == 0 and "<vmtune:undo" in inactive(name)
    uid = virsh("domuuid", name).strip()
    (tmp_path / "originals" / f"{uid}.xml").unlink()
    assert run(capsys, "tag", name, "--profile", "throughput")[0] == 0
    assert "<vmtune:undo" in inactive(name) and vmtune_tag(inactive(name)) == "throughput"
    rc, out, err = run(capsys, "revert", name)
    assert rc == 0, err
    back = tree(inactive(name))
    assert back.find("devices/disk/target").get("bus") == "ide"
    assert "<vmtune:undo" not in inactive(name)
    assert vmtune_tag(inactive(name)) == "throughput"  # retagged by hand since: the hand wins
    assert inactive(name).replace(' profile="throughput"', "") .count("<vmtune:tune") <= 1
    assert tree(original).find("devices/disk/target").get("bus") == "ide"


def test_apply_all_places_latency_first_in_a_stable_plan(doms, capsys):
    """--all on three domains (latency, throughput, balanced; names in the opposite order): the plan
    places latency first, then throughput, then balanced, is the same on every run, defines what it
    printed, and a second apply finds nothing to change. --match keeps other sessions' domains out."""
    free_dedicated_or_skip(1)
    token = uuid.uuid4().hex[:8]
    glob = f"vmtune-test-all-{token}-*"
    names = {p: doms.define(minimal_domain(), f"vmtune-test-all-{token}-{c}")
             for p, c in (("balanced", "a"), ("throughput", "b"), ("latency", "c"))}
    for profile in ("throughput", "latency"):
        assert run(capsys, "tag", names[profile], "--profile", profile)[0] == 0

    rc, first = run_json(capsys, "apply", "--all", "--match", glob, "--dry-run")
    assert rc == 0, first
    rc, second = run_json(capsys, "apply", "--all", "--match", glob, "--dry-run")
    assert rc == 0 and second == first
    order = [row["name"] for row in first["domains"]]
    assert order == [names["latency"], names["throughput"], names["balanced"]]
    assert not any(row["defined"] for row in first["domains"])
    assert all(vmtune_tag(inactive(n)) in (None, p) and tree(inactive(n)).find("cputune") is None
               for p, n in names.items())

    rc, done = run_json(capsys, "apply", "--all", "--match", glob)
    assert rc == 0
    assert [(r["name"], r["placement"]) for r in done["domains"]] == [(r["name"], r["placement"]) for r in first["domains"]]
    assert all(r["defined"] for r in done["domains"])
    lat = tree(inactive(names["latency"]))
    (pin,) = [int(e.get("cpuset")) for e in lat.iterfind("cputune/vcpupin")]
    assert pin == first["domains"][0]["placement"]["vcpupins"]["0"]
    for profile in ("throughput", "balanced"):
        allowed = cpuset.parse(tree(inactive(names[profile])).find("vcpu").get("cpuset"))
        assert pin not in allowed, (profile, allowed)

    rc, again = run_json(capsys, "apply", "--all", "--match", glob)
    assert rc == 0 and not any(r["changed"] or r["defined"] for r in again["domains"])

    rc, plan = run_json(capsys, "plan")
    mine = set(names.values())
    # other sessions' domains may float onto ours; none of ours is in the wrong
    ours = [p for p in plan["problems"] if set(p["domains"]) <= mine or p["domains"][0] in mine]
    assert not ours, ours
    rows = {r["name"]: r for r in plan["domains"]}
    assert rows[names["latency"]]["pinned"] == str(pin) and rows[names["latency"]]["profile"] == "latency"


def test_apply_live_moves_a_running_domain(doms, capsys):
    """--live pins the running domain's vCPU and emulator where the new definition says, now;
    virsh vcpupin / emulatorpin show it, and the output says the rest waits for the next boot."""
    free_dedicated_or_skip(1)
    name = doms.define(minimal_domain())  # diskless: it sits in the firmware, running
    virsh("start", name)
    emulator_before = virsh("emulatorpin", name, "--live").split()[-1]
    rc, out, err = run(capsys, "apply", name, "--profile", "latency", "--live")
    assert rc == 0, err
    assert "take effect at the next boot" in out
    pinned = tree(inactive(name))
    vcpu_cpu = pinned.find("cputune/vcpupin").get("cpuset")
    emulator = pinned.find("cputune/emulatorpin").get("cpuset")
    assert emulator == vcpu_cpu != emulator_before  # type='qemu' (TCG): the emulator goes beside the vCPU
    assert re.search(rf"^\s*0\s+{re.escape(vcpu_cpu)}\s*$", virsh("vcpupin", name, "--live"), re.MULTILINE), virsh("vcpupin", name)
    assert virsh("emulatorpin", name, "--live").split()[-1] == emulator
    assert virsh("domstate", name).strip() == "running"
    assert vmtune_tag(virsh("dumpxml", name)) is None  # the live definition itself is untouched


def test_apply_without_live_leaves_the_running_threads(doms, capsys):
    free_dedicated_or_skip(1)
    name = doms.define(minimal_domain())
    virsh("start", name)
    before = virsh("vcpupin", name, "--live")
    rc, out, err = run(capsys, "apply", name, "--profile", "latency")
    assert rc == 0, err
    assert "--live moves" in out
    assert virsh("vcpupin", name, "--live") == before
    rc, data = run_json(capsys, "plan")
    drift = [p for p in data["problems"] if p["kind"] == "not-live" and p["domains"] == [name]]
    assert rc == 1 and len(drift) == 1 and "vcpu0" in drift[0]["message"], data["problems"]
    rc, out, err = run(capsys, "apply", name, "--live")  # the tag says latency now; moves the threads
    assert rc == 0, err
    rc, data = run_json(capsys, "plan")
    assert not [p for p in data["problems"] if p["kind"] == "not-live" and p["domains"] == [name]], data["problems"]


def test_apply_refuses_a_transient_domain(live, capsys, tmp_path):
    name = f"vmtune-test-transient-{uuid.uuid4().hex[:8]}"
    xml = tmp_path / "t.xml"
    xml.write_text(minimal_domain().replace("<name>x</name>", f"<name>{name}</name>"))
    virsh("create", str(xml))
    try:
        rc, out, err = run(capsys, "apply", name)
        one_line_error(rc, err, 1, "transient")
        assert out == ""
    finally:
        virsh("destroy", name, check=False)


def test_apply_that_does_not_fit_defines_nothing(doms, capsys):
    """Three vCPUs of dedicated CPUs on a 2-CPU host: exit 3, the domain named, its XML as it was."""
    name = doms.define(minimal_domain(vcpus=3))
    before = inactive(name)
    rc, out, err = run(capsys, "apply", name, "--profile", "latency")
    one_line_error(rc, err, 3, name, "do not fit")
    assert out == ""
    assert inactive(name) == before


# -- plan -------------------------------------------------------------------------------------------------
def test_plan_reports_a_real_overlap(doms, capsys):
    """Two latency-tagged domains pinned to the same CPU: plan exits 1, names both, and says where."""
    pins = "<cputune><vcpupin vcpu='0' cpuset='1'/><emulatorpin cpuset='0'/></cputune>"
    meta = f"<metadata><vmtune:tune xmlns:vmtune='{NS}' profile='latency'/></metadata>"
    a = doms.define(minimal_domain(extra=meta + pins))
    b = doms.define(minimal_domain(extra=meta + pins))
    rc, data = run_json(capsys, "plan")
    assert rc == 1
    overlaps = [p for p in data["problems"] if p["kind"] == "cpu-overlap" and set(p["domains"]) == {a, b}]
    assert len(overlaps) == 1 and overlaps[0]["cpus"] == "1", data["problems"]
    rows = {r["name"]: r for r in data["domains"]}
    assert rows[a]["pinned"] == "1" and rows[a]["state"] == "shut off" and rows[a]["profile"] == "latency"
    assert data["nodes"] and data["uri"] == URI

    rc, out, _ = run(capsys, "plan")
    assert rc == 1 and "cpu-overlap" in out and a in out and b in out, out
    assert out.splitlines()[0].split()[:3] == ["DOMAIN", "PROFILE", "STATE"]


def test_plan_as_a_process(live, tmp_path):
    """python -m vmtune plan --json: valid JSON on stdout and exit 0 or 1, never a traceback."""
    cfg = tmp_path / "vmtune.toml"
    cfg.write_text("")
    env = {**os.environ, "VMTUNE_CONFIG": str(cfg), "VMTUNE_PROFILES": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "vmtune", "plan", "--json"], capture_output=True, text=True,
                          env=env, cwd=Path(__file__).parent.parent, timeout=120, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] == (proc.returncode == 0)


def _two_node_tree(tmp_path) -> str:
    """A sysfs tree (and proc beside it) of a 2-node, 8-CPU host with isolcpus 2-3,6-7."""
    from fixtures.hosttrees import write_sysfs

    from vmtune.host import Cell, Cpu, Host

    cpus = {c: Cpu(c, c // 4, c // 4, 0, c % 4, frozenset({c})) for c in range(8)}
    cells = tuple(Cell(n, tuple(range(4 * n, 4 * n + 4)), 8 << 20, {2048: 1024}, {0: 10 + 11 * n, 1: 21 - 11 * n})
                  for n in (0, 1))
    return write_sysfs(Host("x86_64", cells, cpus, frozenset({2, 3, 6, 7})), str(tmp_path))


def test_the_system_daemons_host_is_this_machines_sysfs(doms, capsys, monkeypatch, tmp_path):
    """Issue 27, one host per URI: qemu:///system's host is this machine's sysfs (VMTUNE_SYSFS, here
    a 2-node, 8-CPU tree with isolcpus 2-3,6-7), for plan and apply --dry-run alike, as for map and
    rewrite; not libvirt's capabilities (this machine's 2 CPUs, where a 2-vCPU latency domain does
    not fit)."""
    monkeypatch.setenv("VMTUNE_SYSFS", _two_node_tree(tmp_path))
    monkeypatch.setenv("VMTUNE_STATE_DIR", str(tmp_path / "state"))
    name = doms.define(minimal_domain(vcpus=2))
    rc, data = run_json(capsys, "plan")
    assert rc in (0, 1)
    assert [(n["node"], n["cpus"], n["reserved"]) for n in data["nodes"]] == [(0, "0-3", "0-1"), (1, "4-7", "4-5")]
    assert data["host"] == {"uri": URI, "from": "sysfs", "sysfs": str(tmp_path / "sys"), "arch": os.uname().machine,
                            "cpus": "0-7", "isolated": "2-3,6-7", "nodes": {"0": "0-3", "1": "4-7"}}
    rc, data = run_json(capsys, "apply", "--dry-run", name, "--profile", "latency")
    assert rc == 0
    (row,) = data["domains"]
    assert set(row["placement"]["vcpupins"].values()) in ({2, 3}, {6, 7}), row["placement"]
    assert data["host"]["from"] == "sysfs"
    rc, data = run_json(capsys, "map")
    assert rc == 0 and [n["id"] for n in data["nodes"]] == [0, 1] and data["isolcpus"] == "2-3,6-7"


def test_the_checkout_route_gives_the_live_commands(tmp_path):
    """README's route from a fresh checkout on Debian (python3 is /usr/bin/python3): the first
    command, ``scripts/vmtune rewrite ... --diff``, installs no libvirt binding; ``scripts/vmtune
    plan`` gives the venv Debian's python3-libvirt (apt-get as root when it is missing), linked in
    alone, and runs (exit 0 or 1, not 4: "libvirt-python is not installed")."""
    import shutil

    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("no Debian python3 (/usr/bin/python3)")
    status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "python3-libvirt"], capture_output=True, text=True)
    if os.geteuid() != 0 and status.stdout != "install ok installed":
        pytest.skip("python3-libvirt is not installed and apt-get needs root")
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT / "vmtune", copy / "vmtune", ignore=shutil.ignore_patterns("__pycache__"))
    for rel in ("setup.cfg", "pyproject.toml", "README.md", "scripts/bootstrap", "scripts/apt-lib", "scripts/vmtune",
                "examples/stock-latency.xml"):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, copy / rel)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYENV", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"  # a fresh Debian machine's: python3 is Debian's

    def sh(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, cwd=copy, timeout=900)

    first = sh(copy / "scripts" / "vmtune", "rewrite", "examples/stock-latency.xml", "--diff")
    assert first.returncode == 0 and first.stdout.startswith("---"), first.stderr
    python = copy / ".venv" / "bin" / "python"
    assert sh(python, "-c", "import sys; print(sys.base_prefix)").stdout.strip() == "/usr"
    assert sh(python, "-c", "import libvirt").returncode != 0  # the first command installs none

    plan = sh(copy / "scripts" / "vmtune", "plan", "--connect", "test:///default")
    assert plan.returncode in (0, 1), plan.stderr
    assert "NODE" in plan.stdout and "8-15" in plan.stdout  # the test driver's host
    found = sh(python, "-c", "import libvirt, os; print(os.path.realpath(libvirt.__file__))")
    assert found.stdout.strip() == "/usr/lib/python3/dist-packages/libvirt.py", found.stderr
    if list(Path("/usr/lib/python3/dist-packages").glob("apt_pkg*.so")):  # nothing else of Debian's comes in
        assert sh(python, "-c", "import apt_pkg").returncode != 0
    again = sh(copy / "scripts" / "bootstrap", "--libvirt")
    assert again.returncode == 0 and again.stderr == ""


def test_revert_of_a_domain_vmtune_never_applied(doms, capsys):
    name = doms.define(minimal_domain())
    rc, out, err = run(capsys, "revert", name)
    one_line_error(rc, err, 1, "no original XML")
    assert out == ""


def test_libvirt_refusal_rolls_back_the_whole_run(doms, capsys, monkeypatch, tmp_path):
    """If libvirt refuses the second tuned XML, the error names that domain, the first one gets its
    previous XML back, and no original is left behind."""
    from vmtune.live import planner

    token = uuid.uuid4().hex[:8]
    a = doms.define(minimal_domain(), f"vmtune-test-refuse-{token}-a")
    b = doms.define(minimal_domain(), f"vmtune-test-refuse-{token}-b")
    before = {n: inactive(n) for n in (a, b)}
    real = planner.plan

    def second_is_broken(*args, **kwargs):
        steps = real(*args, **kwargs)
        assert [s.name for s in steps] == [a, b]
        # a duplicate attribute: libvirt cannot parse it
        object.__setattr__(steps[1].result, "xml", steps[1].result.xml.replace("<memory", "<memory unit='x'", 1))
        return steps

    monkeypatch.setattr(planner, "plan", second_is_broken)
    rc, out, err = run(capsys, "apply", a, b, "--profile", "balanced")
    one_line_error(rc, err, 1, b, "libvirt refused the tuned XML", "previous XML again")
    assert out == ""
    assert {n: inactive(n) for n in (a, b)} == before
    assert not list((tmp_path / "originals").glob("*.xml"))


def test_a_definition_changed_meanwhile_is_not_overwritten(doms, capsys, monkeypatch):
    """Someone edits the domain between vmtune's read and its define: vmtune stops, and their edit stays."""
    from vmtune.live import planner

    name = doms.define(minimal_domain())
    real = planner.plan

    def edit_meanwhile(*args, **kwargs):
        steps = real(*args, **kwargs)
        virsh("desc", name, "--config", "--new-desc", "edited by someone else")
        return steps

    monkeypatch.setattr(planner, "plan", edit_meanwhile)
    rc, out, err = run(capsys, "apply", name, "--profile", "balanced")
    one_line_error(rc, err, 1, name, "changed while vmtune planned it")
    assert out == ""
    assert tree(inactive(name)).findtext("description") == "edited by someone else"
    assert vmtune_tag(inactive(name)) is None
