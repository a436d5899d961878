"""The command line (vmtune/cli/): output modes, exit codes, one-line errors, atomic writes, stdin,
``-m vmtune``."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from lxml import etree

import vmtune.cli
import vmtune.config
from vmtune import cli
from vmtune.host import Host

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
HOST = EXAMPLES / "hosts" / "2node-smt.xml"
DB = EXAMPLES / "db-4vcpu.xml"
STOCK = EXAMPLES / "stock-latency.xml"
CORPUS = Path(os.environ.get("VMTUNE_CORPUS", ROOT.parent / "shared" / "corpus"))
H = ["--host", str(HOST)]
# the example host keeps the first core of each node: CPUs 0,16 (node 0) and 8,24 (node 1)
EXAMPLE_RESERVED = {0, 8, 16, 24}


# No /etc/vmtune, $VMTUNE_CONFIG or $VMTUNE_PROFILES of the machine leaks into a test (fixtures/cli.py).
pytestmark = pytest.mark.usefixtures("no_machine_config")


def run(capsys, *argv) -> tuple[int, str, str]:
    """Run the CLI in-process; return (exit code, stdout, stderr)."""
    capsys.readouterr()
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def run_proc(*argv, stdin: bytes | None = None, tmp: Path, cwd: Path | None = None):
    """Run ``python -m vmtune`` as a real process with a config and profile dir of its own."""
    cfg = tmp / "proc-vmtune.toml"
    cfg.write_text("")
    profiles = tmp / "proc-profiles"
    profiles.mkdir(exist_ok=True)
    env = {**os.environ, "VMTUNE_CONFIG": str(cfg), "VMTUNE_PROFILES": str(profiles)}
    return subprocess.run([sys.executable, "-m", "vmtune", *map(str, argv)], input=stdin,
                          capture_output=True, env=env, cwd=cwd or tmp, timeout=120)


def feed_stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def assert_one_line_error(rc: int, err: str, want_rc: int, *needles: str) -> None:
    assert rc == want_rc, err
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1, f"not one line: {err!r}"
    assert err.startswith("vmtune: error: "), err
    for needle in needles:
        assert needle in err, err


def listing(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


# -- bad inputs ---------------------------------------------------------------------------------
LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE domain [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<domain type="kvm"><name>&lol9;</name><memory unit="MiB">512</memory><vcpu>1</vcpu>
<os><type arch="x86_64">hvm</type></os></domain>
"""


def xxe(target: str) -> str:
    return f"""<?xml version="1.0"?>
<!DOCTYPE domain [ <!ENTITY xxe SYSTEM "{target}"> ]>
<domain type="kvm"><name>&xxe;</name><memory unit="MiB">512</memory><vcpu>1</vcpu>
<os><type arch="x86_64">hvm</type></os></domain>
"""


def db_with(old: str, new: str) -> str:
    text = DB.read_text()
    assert old in text
    return text.replace(old, new)


# name -> (domain XML text or a corpus file, extra args, exit code, words the error must contain)
BAD_DOMAINS = {
    "malformed": ('<domain type="kvm"><name>x</nam></domain>', [], 1, ["not well-formed"]),
    "truncated": ('<domain type="kvm"><name>x', [], 1, ["not well-formed"]),
    "empty": ("", [], 1, ["domain XML"]),
    "billion-laughs": (LAUGHS, [], 1, ["DOCTYPE"]),
    "external-entity": (xxe("file:///etc/passwd"), [], 1, ["DOCTYPE"]),
    "doctype-empty-subset": ('<!DOCTYPE domain []>' + DB.read_text().split("?>", 1)[-1], [], 1, ["DOCTYPE"]),
    "doctype-system-id": ('<!DOCTYPE domain SYSTEM "file:///etc/passwd">' + DB.read_text().split("?>", 1)[-1], [],
                          1, ["DOCTYPE"]),
    "doctype-public-id": ('<!DOCTYPE domain PUBLIC "-//x//y" "http://x/y.dtd">' + DB.read_text().split("?>", 1)[-1],
                          [], 1, ["DOCTYPE"]),
    "not-a-domain": (HOST.read_text(), [], 1, ["<capabilities>"]),
    "xen": (CORPUS / "domains" / "vm-xen-hvm.xml", [], 1, ["xen"]),
    "lxc": (CORPUS / "domains" / "vm-lxc-container.xml", [], 1, ["lxc"]),
    "aarch64-on-x86": (CORPUS / "domains" / "vm-aarch64-kvm-virt-gic.xml", [], 1, ["aarch64", "x86_64"]),
    "unknown-profile": (DB.read_text(), ["--profile", "nosuch"], 1, ["nosuch"]),
    "profile-with-slash": (DB.read_text(), ["--profile", "../etc/passwd"], 1, ["bad profile name"]),
    "not-utf8": ("<domain type='kvm'><name>\udcff</name></domain>", [], 1, ["not UTF-8"]),
    "40-vcpus-latency": (db_with(">4</vcpu>", ">40</vcpu>"), ["--profile", "latency"], 3, ["40"]),
    "arch-with-newline": (db_with('arch="x86_64"', 'arch="x86&#10;64"'), [], 1, ["does not run natively"]),
}


def materialise(source, folder: Path, name: str = "in.xml") -> Path:
    """Put a bad domain in ``folder`` (byte-exact for the not-UTF-8 one)."""
    path = folder / name
    if isinstance(source, Path):
        if not source.is_file():
            pytest.skip(f"{source} is not here")
        shutil.copyfile(source, path)
    else:
        path.write_bytes(source.encode("utf-8", "surrogateescape"))
    return path


@pytest.mark.parametrize("case", BAD_DOMAINS, ids=str)
def test_bad_domain_fails_with_one_line_and_creates_no_output_file(case, tmp_path, capsys):
    """A bad domain exits with its code, one `vmtune: error:` line, empty stdout and no -o file."""
    source, extra, want_rc, needles = BAD_DOMAINS[case]
    src_dir, out_dir = tmp_path / "src", tmp_path / "out"
    src_dir.mkdir(), out_dir.mkdir()
    path = materialise(source, src_dir)
    rc, out, err = run(capsys, "rewrite", path, *H, "-o", out_dir / "tuned.xml", *extra)
    assert_one_line_error(rc, err, want_rc, *needles)
    assert out == ""
    assert listing(out_dir) == set()


@pytest.mark.parametrize("case", BAD_DOMAINS, ids=str)
def test_bad_domain_in_place_leaves_input_byte_for_byte(case, tmp_path, capsys):
    """With -i, a failing rewrite leaves the input file, its mode and its directory untouched."""
    source, extra, want_rc, _ = BAD_DOMAINS[case]
    path = materialise(source, tmp_path)
    path.chmod(0o640)
    before, mode = path.read_bytes(), stat.S_IMODE(path.stat().st_mode)
    rc, out, err = run(capsys, "rewrite", path, *H, "-i", *extra)
    assert rc == want_rc and "Traceback" not in err
    assert path.read_bytes() == before
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert listing(tmp_path) >= {"in.xml"} and not [n for n in listing(tmp_path) if n.startswith(".vmtune-")]


def test_external_entity_is_never_read(tmp_path, capsys):
    """An external entity pointing at a readable secret is refused and its content is never printed."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-4711")
    path = tmp_path / "in.xml"
    path.write_text(xxe(secret.as_uri()))
    rc, out, err = run(capsys, "rewrite", path, *H, "--json")
    assert_one_line_error(rc, err, 1, "DOCTYPE")
    assert "TOP-SECRET" not in out + err


def test_billion_laughs_is_refused_quickly_as_a_subprocess(tmp_path):
    """The billion-laughs domain is refused in a real process without expanding (fast, small stderr)."""
    path = tmp_path / "laughs.xml"
    path.write_text(LAUGHS)
    proc = run_proc("rewrite", path, *H, tmp=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == b""
    assert proc.stderr.startswith(b"vmtune: error: ") and proc.stderr.count(b"\n") == 1
    assert b"lollol" not in proc.stderr


def test_missing_domain_file_is_exit_1(tmp_path, capsys):
    """A domain file that does not exist is an invalid input naming the file."""
    rc, out, err = run(capsys, "rewrite", tmp_path / "nope.xml", *H)
    assert_one_line_error(rc, err, 1, "nope.xml", "No such file")
    assert out == ""


def test_domain_path_with_newline_still_gives_one_error_line(tmp_path, capsys):
    """An error quoting a file name that contains a newline is still a single stderr line."""
    rc, out, err = run(capsys, "rewrite", tmp_path / "new\nline.xml", *H)
    assert_one_line_error(rc, err, 1, "No such file")


def test_in_place_with_stdin_is_refused(monkeypatch, capsys):
    """`-i` with `-` (stdin) is an invalid input, not a write to a file called '-'."""
    feed_stdin(monkeypatch, DB.read_bytes())
    rc, out, err = run(capsys, "rewrite", "-", "-i", *H)
    assert_one_line_error(rc, err, 1, "stdin")
    assert out == "" and not Path("-").exists()


@pytest.mark.parametrize("kind", ["missing-dir", "parent-is-a-file", "target-is-a-dir"])
def test_unwritable_output_is_exit_1_and_leaves_nothing(kind, tmp_path, capsys):
    """An -o path that cannot be written is exit 1, with no temp file left in any directory."""
    (tmp_path / "plain").write_text("x")
    (tmp_path / "adir").mkdir()
    target = {"missing-dir": tmp_path / "nodir" / "out.xml",
              "parent-is-a-file": tmp_path / "plain" / "out.xml",
              "target-is-a-dir": tmp_path / "adir"}[kind]
    before = listing(tmp_path)
    rc, out, err = run(capsys, "rewrite", DB, *H, "-o", target)
    assert_one_line_error(rc, err, 1, "cannot write")
    assert out == ""
    assert listing(tmp_path) == before and listing(tmp_path / "adir") == set()


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into a read-only directory")
def test_read_only_output_directory_is_exit_1(tmp_path, capsys):
    """An -o file in a directory without write permission is exit 1 and no file appears."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        rc, out, err = run(capsys, "rewrite", DB, *H, "-o", folder / "out.xml")
        assert_one_line_error(rc, err, 1, "cannot write")
        assert listing(folder) == set()
    finally:
        folder.chmod(0o755)


def test_failed_rename_removes_temp_file_and_keeps_old_output(tmp_path, capsys, monkeypatch):
    """When the final rename fails the old -o file stays as it was and the temp file is removed."""
    target = tmp_path / "out.xml"
    target.write_text("old")

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(vmtune.cli.os, "replace", refuse)
    rc, out, err = run(capsys, "rewrite", DB, *H, "-o", target)
    assert_one_line_error(rc, err, 1, "cannot write", "Permission denied")
    assert target.read_text() == "old"
    assert listing(tmp_path) == {"out.xml"}


def test_interrupted_write_removes_temp_file(tmp_path, capsys, monkeypatch):
    """Ctrl-C during the write exits 130, leaves the input untouched and removes the temp file."""
    path = tmp_path / "in.xml"
    shutil.copyfile(DB, path)

    def interrupt(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(vmtune.cli.os, "fsync", interrupt)
    rc, out, err = run(capsys, "rewrite", path, *H, "-i")
    assert rc == 130
    assert path.read_bytes() == DB.read_bytes()
    assert listing(tmp_path) == {"in.xml"}


def test_bad_host_capabilities_is_exit_1(tmp_path, capsys):
    """--host with a file that is not capabilities XML is an invalid input."""
    rc, out, err = run(capsys, "rewrite", DB, "--host", DB)
    assert_one_line_error(rc, err, 1, "capabilities")


def test_bad_sysfs_is_exit_1(tmp_path, capsys):
    """--sysfs with a directory that is not sysfs is an invalid input."""
    rc, out, err = run(capsys, "rewrite", DB, "--sysfs", tmp_path)
    assert_one_line_error(rc, err, 1, "sysfs")


def test_bad_claim_is_exit_1(tmp_path, capsys):
    """A malformed --claim file is an invalid input that names the claim."""
    claim = tmp_path / "other.xml"
    claim.write_text("<domain")
    rc, out, err = run(capsys, "rewrite", DB, *H, "--claim", claim)
    assert_one_line_error(rc, err, 1, "claimed domain")


# a file that is not well-formed, in each place a file is read: (argv with BAD for the file, stdin too)
NOT_WELL_FORMED = {
    "rewrite": ["rewrite", "BAD", *H],
    "untune": ["untune", "BAD"],
    "host": ["rewrite", DB, "--host", "BAD"],
    "claim": ["rewrite", DB, *H, "--claim", "BAD"],
    "nodedev": ["rewrite", DB, *H, "--nodedev", "BAD"],
    "map-claim": ["map", *H, "--claim", "BAD"],
    "map-host": ["map", "--host", "BAD", "--claim", DB],
    "topology": ["topology", "--host", "BAD"],
}


@pytest.mark.parametrize("case", NOT_WELL_FORMED, ids=str)
def test_a_file_that_is_not_well_formed_is_named_with_its_line_and_column(case, tmp_path, capsys):
    """The error names the file, and lxml's line and column, never lxml's ``<string>``."""
    bad = tmp_path / "broken dom.xml"  # a space in the name, too
    bad.write_text('<domain type="kvm">\n  <name>x</name>\n  <vcpu>2</cpu>\n</domain>\n')
    argv = [bad if a == "BAD" else a for a in NOT_WELL_FORMED[case]]
    rc, out, err = run(capsys, *argv)
    assert_one_line_error(rc, err, 1, f"{bad} is not well-formed: ", "line 3, column 16")
    assert "<string>" not in err and out == ""


def test_a_not_well_formed_stdin_is_named_stdin(monkeypatch, capsys):
    """``-`` is named ``<stdin>`` in the error."""
    feed_stdin(monkeypatch, b"<domain type='kvm'>\n<name>x</nam>\n</domain>\n")
    rc, out, err = run(capsys, "rewrite", "-", *H)
    assert_one_line_error(rc, err, 1, "domain XML <stdin> is not well-formed: ", "line 2, column")
    assert "<string>" not in err


def test_a_claim_that_is_the_domain_itself_is_said(tmp_path, capsys):
    """A claim with the domain's own uuid or name is left out (a domain does not block itself),
    and a warning says so, naming the file; the library gives it in Result.warnings."""
    same_uuid = tmp_path / "self.xml"
    same_uuid.write_text(DB.read_text().replace("<name>db</name>", "<name>db-old</name>"))
    same_name = tmp_path / "same-name.xml"
    same_name.write_text(DB.read_text().replace("0f1e2d3c-4b5a", "0f1e2d3c-0000"))
    other = tmp_path / "other.xml"
    other.write_text(DB.read_text().replace("0f1e2d3c-4b5a", "0f1e2d3c-0000").replace("<name>db</name>",
                                                                                      "<name>other</name>"))
    alone = rewrite_json(capsys, DB, *H, "--profile", "latency")
    for claim, same in ((same_uuid, "uuid"), (same_name, "name")):
        rc, out, err = run(capsys, "rewrite", DB, *H, "--profile", "latency", "--claim", claim)
        assert rc == 0, err
        (said,) = [line for line in err.splitlines() if "itself" in line]
        assert said.startswith("vmtune: warning: ") and str(claim) in said and f"the same {same}" in said
        assert rewrite_json(capsys, DB, *H, "--profile", "latency", "--claim", claim)["placement"] == alone["placement"]
    rc, out, err = run(capsys, "rewrite", DB, *H, "--profile", "latency", "--claim", other)
    assert rc == 0 and "itself" not in err
    result = vmtune.rewrite(DB.read_text(), Host.from_capabilities(HOST.read_text()), "latency", [same_uuid.read_text()])
    assert [w for w in result.warnings if "is this domain itself (the same uuid" in w]


def test_missing_explicit_config_is_exit_1(tmp_path, capsys):
    """--config naming a file that does not exist is an invalid input."""
    rc, out, err = run(capsys, "rewrite", DB, *H, "--config", tmp_path / "none.toml")
    assert_one_line_error(rc, err, 1, "none.toml")


@pytest.mark.parametrize("argv", [
    [],
    ["frobnicate"],
    ["rewrite"],
    ["rewrite", str(DB), "--diff", "--json"],
    ["rewrite", str(DB), "--explain", "--diff"],
    ["rewrite", str(DB), "-o", "x.xml", "-i"],
    ["rewrite", str(DB), "--host", str(HOST), "--sysfs", "/sys"],
    ["topology", "--bogus"],
    ["profiles", "extra"],
], ids=lambda a: " ".join(a) or "no-args")
def test_usage_errors_exit_2(argv, capsys):
    """Bad command lines are argparse usage errors: exit 2 with one line, as every error (issue 27),
    naming the command and where its help is; nothing on stdout."""
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    out, err = capsys.readouterr()
    assert exc.value.code == 2
    assert out == "" and err.startswith("vmtune: error: ") and err.count("\n") == 1 and "--help)" in err, err


# -- successful rewrites ------------------------------------------------------------------------
def rewrite_json(capsys, *argv) -> dict:
    rc, out, err = run(capsys, "rewrite", *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


def test_rewrite_prints_the_tuned_domain_on_stdout(tmp_path, capsys, monkeypatch):
    """Without -o/-i the tuned XML goes to stdout, is a <domain>, and no file is written."""
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, "rewrite", DB, *H, "--profile", "latency")
    assert rc == 0, err
    root = etree.fromstring(out.encode())
    assert root.tag == "domain" and root.findtext("name") == "db"
    pins = {int(p.get("vcpu")): p.get("cpuset") for p in root.findall("cputune/vcpupin")}
    assert sorted(pins) == [0, 1, 2, 3]
    assert root.find("numatune/memory").get("nodeset") in ("0", "1")
    assert DB.read_text() != out
    assert listing(tmp_path) == set()


def test_profile_defaults_to_the_tag_then_balanced(capsys):
    """The profile is the domain's vmtune tag when present, else balanced; --profile overrides both."""
    assert rewrite_json(capsys, STOCK, *H)["profile"] == "latency"
    assert rewrite_json(capsys, DB, *H)["profile"] == "balanced"
    assert rewrite_json(capsys, STOCK, *H, "--profile", "throughput")["profile"] == "throughput"


def test_json_has_the_documented_shape_and_matches_plain_output(capsys):
    """--json has exactly profile, changes[element,before,after,reason], placement, warnings, kept,
    guest_os, xml."""
    data = rewrite_json(capsys, DB, *H, "--profile", "latency")
    assert set(data) == {"profile", "changes", "placement", "warnings", "kept", "guest_os", "xml"}
    assert data["guest_os"]["family"] == "linux" and data["guest_os"]["evidence"]
    assert data["profile"] == "latency"
    assert data["changes"] and all(set(c) == {"element", "before", "after", "reason"} for c in data["changes"])
    assert all(c["reason"] and c["element"].startswith("/domain") for c in data["changes"])
    assert isinstance(data["warnings"], list) and isinstance(data["placement"], dict)
    assert data["placement"]["mode"] == "dedicated"
    rc, plain, _ = run(capsys, "rewrite", DB, *H, "--profile", "latency")
    assert data["xml"] == plain


def test_dedicated_pins_avoid_the_hosts_reserved_cores(capsys):
    """With the latency profile every vCPU gets its own host CPU outside the reserved first cores."""
    pins = rewrite_json(capsys, DB, *H, "--profile", "latency")["placement"]["vcpupins"]
    cpus = [int(c) for c in pins.values()]
    assert len(cpus) == 4 and len(set(cpus)) == 4
    assert not set(cpus) & EXAMPLE_RESERVED


def test_explain_prints_one_line_and_reason_per_change(capsys):
    """--explain prints a header with the change count, the placement's reasons, then one line per
    change ending in its reason (cut with … where the line would pass 200 characters)."""
    changes = rewrite_json(capsys, DB, *H, "--profile", "latency")["changes"]
    rc, out, err = run(capsys, "rewrite", DB, *H, "--profile", "latency", "--explain")
    assert rc == 0, err
    lines = [line for line in out.splitlines() if not line.startswith(("placement: ", "guest OS: "))]
    assert lines[0] == f"profile latency: {len(changes)} change(s)"
    assert out.splitlines()[1] == "guest OS: Linux, from libosinfo id http://debian.org/debian/12"
    assert len(lines) == 1 + len(changes)
    for line, change in zip(lines[1:], changes):
        assert line.startswith(f"{change['element']}: ") and len(line) <= 200
        shown = line.split("  # ", 1)[1]
        assert shown == change["reason"] or (shown.endswith("…") and change["reason"].startswith(shown[:-1]))


def test_diff_is_a_unified_diff_from_input_to_output(capsys):
    """--diff prints a unified diff whose - lines come from the input and + lines from the output."""
    rc, plain, _ = run(capsys, "rewrite", DB, *H, "--profile", "latency")
    rc, out, err = run(capsys, "rewrite", DB, *H, "--profile", "latency", "--diff")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == f"--- {DB}" and lines[1] == f"+++ {DB} (vmtune latency)"
    assert any(line.startswith("@@ ") for line in lines)
    removed = [line[1:] for line in lines[2:] if line.startswith("-")]
    added = [line[1:] for line in lines[2:] if line.startswith("+")]
    assert removed and added
    assert set(removed) <= set(DB.read_text().splitlines())
    assert set(added) <= set(plain.splitlines())
    assert any("vcpupin" in line for line in added)


def test_output_file_gets_the_xml_and_stdout_stays_empty(tmp_path, capsys):
    """-o writes exactly the XML that stdout would get, mode 0644, and leaves no temp file."""
    rc, plain, _ = run(capsys, "rewrite", DB, *H)
    target = tmp_path / "tuned.xml"
    rc, out, err = run(capsys, "rewrite", DB, *H, "-o", target)
    assert rc == 0, err
    assert out == ""
    assert target.read_text() == plain
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert listing(tmp_path) == {"tuned.xml"}


def test_output_file_with_json_still_prints_json(tmp_path, capsys):
    """-o together with --json writes the XML to the file and prints the JSON result."""
    target = tmp_path / "tuned.xml"
    rc, out, err = run(capsys, "rewrite", DB, *H, "-o", target, "--json")
    assert rc == 0, err
    assert json.loads(out)["xml"] == target.read_text()


def test_in_place_replaces_the_input_and_keeps_its_mode(tmp_path, capsys):
    """-i replaces DOMAIN.xml with the tuned XML, keeps its permissions and leaves no temp file."""
    rc, plain, _ = run(capsys, "rewrite", DB, *H)
    path = tmp_path / "db.xml"
    shutil.copyfile(DB, path)
    path.chmod(0o600)
    rc, out, err = run(capsys, "rewrite", path, *H, "-i")
    assert rc == 0, err
    assert out == ""
    assert path.read_text() == plain
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert listing(tmp_path) == {"db.xml"}


def test_stdin_dash_gives_the_same_result_as_the_file(monkeypatch, capsys):
    """`-` reads the domain from stdin; the result equals reading the file, and --diff names 'stdin'."""
    rc, plain, _ = run(capsys, "rewrite", DB, *H)
    feed_stdin(monkeypatch, DB.read_bytes())
    rc, out, err = run(capsys, "rewrite", "-", *H)
    assert rc == 0, err
    assert out == plain
    feed_stdin(monkeypatch, DB.read_bytes())
    rc, out, err = run(capsys, "rewrite", "-", *H, "--diff")
    assert rc == 0 and out.startswith("--- stdin\n+++ stdin (vmtune balanced)\n")


def test_claimed_domains_cpus_are_not_reused(tmp_path, capsys):
    """--claim of a latency domain keeps its dedicated CPUs out of the new domain's pins."""
    claimed = rewrite_json(capsys, DB, *H, "--profile", "latency")
    taken = {int(c) for c in claimed["placement"]["vcpupins"].values()}
    other = tmp_path / "other.xml"
    other.write_text(claimed["xml"])
    alone = rewrite_json(capsys, STOCK, *H)["placement"]["vcpupins"]
    assert {int(c) for c in alone.values()} & taken  # without the claim it would take one of them
    pins = rewrite_json(capsys, STOCK, *H, "--claim", other)["placement"]["vcpupins"]
    assert pins and not {int(c) for c in pins.values()} & taken


def test_windows_boot_disk_moves_to_virtio_only_with_force_virtio(capsys):
    """A Windows guest keeps its IDE boot disk (with a warning) unless --force-virtio is given."""
    win = CORPUS / "domains" / "vm-win10-i440fx-ide-e1000-network.xml"
    if not win.is_file():
        pytest.skip("corpus not here")
    kept = rewrite_json(capsys, win, *H)
    forced = rewrite_json(capsys, win, *H, "--force-virtio")
    bus = lambda d: etree.fromstring(d["xml"].encode()).find("devices/disk/target").get("bus")  # noqa: E731
    assert bus(kept) == "ide" and any("force-virtio" in w for w in kept["warnings"])
    assert bus(forced) == "virtio"


def test_default_host_is_this_machine(capsys):
    """Without --host/--sysfs the 1-vCPU latency example is placed on this machine's online CPUs."""
    here = Host.probe()
    data = rewrite_json(capsys, STOCK)
    assert data["profile"] == "latency"
    pins = {int(c) for c in data["placement"]["vcpupins"].values()}
    assert len(pins) == 1 and pins <= set(here.cpus)
    assert {int(n) for n in data["placement"]["nodes"]} <= set(here.node_ids)


# -- topology and profiles ----------------------------------------------------------------------
def test_topology_lists_each_node_with_cpus_and_reserved(capsys):
    """`vmtune topology --host` prints both example nodes, their CPUs and the reserved first cores."""
    rc, out, err = run(capsys, "topology", *H)
    assert rc == 0, err
    assert "vendor Intel" in out and "smt on" in out and "reserved 0,8,16,24" in out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[2:]}
    assert rows == {"0": "0-7,16-23", "1": "8-15,24-31"}


def test_topology_json_matches_the_host_file(capsys):
    """`vmtune topology --json` gives the nodes, their cores and the reserved set as JSON."""
    rc, out, err = run(capsys, "topology", *H, "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["arch"] == "x86_64" and data["reserved"] == "0,8,16,24"
    assert [n["id"] for n in data["nodes"]] == [0, 1]
    assert data["nodes"][1]["cpus"] == "8-15,24-31"
    assert data["nodes"][0]["cores"][0] == [0, 16]
    assert data["nodes"][0]["free_hugepages"] == {"2048": 4096, "1048576": 8}


def test_profiles_lists_the_builtins(capsys):
    """`vmtune profiles` prints one line per built-in profile with its description."""
    rc, out, err = run(capsys, "profiles")
    assert rc == 0, err
    names = [line.split()[0] for line in out.splitlines()]
    assert names == ["balanced", "latency", "realtime", "throughput"]
    assert all(len(line.split(None, 1)) == 2 for line in out.splitlines())


def test_profiles_json_shows_flattened_inherited_values(capsys):
    """`vmtune profiles --json` shows each profile flattened, realtime inheriting latency's keys."""
    rc, out, err = run(capsys, "profiles", "--json")
    assert rc == 0, err
    rows = {p["name"]: p for p in json.loads(out)}
    assert set(rows) == {"balanced", "latency", "realtime", "throughput"}
    assert rows["realtime"]["cpu_pinning"] == "dedicated"  # from latency
    assert rows["realtime"]["cpu_scheduler"] == "fifo"  # its own
    assert rows["balanced"]["cpu_pinning"] == "float" and rows["balanced"]["cpu_mode"] == "passthrough"


def test_profiles_includes_user_profiles_from_the_config_dir(tmp_path, capsys):
    """A user profile in the config's profiles_dir shows up in `vmtune profiles`."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "gaming.toml").write_text('description = "for games"\ninherit = "latency"\n')
    cfg = tmp_path / "vmtune.toml"
    cfg.write_text(f'profiles_dir = "{folder}"\n')
    rc, out, err = run(capsys, "profiles", "--config", cfg)
    assert rc == 0, err
    assert "gaming       for games" in out.splitlines()


def test_profiles_ignores_hidden_files_in_the_user_dir(tmp_path, capsys, monkeypatch):
    """An editor's hidden `.#name.toml` lock file in the profile directory does not break the listing."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / ".#latency.toml").write_text("junk")
    monkeypatch.setenv("VMTUNE_PROFILES", str(folder))
    rc, out, err = run(capsys, "profiles")
    assert rc == 0, err
    assert len(out.splitlines()) == 4


def test_profiles_lists_the_good_ones_when_one_is_broken(tmp_path, capsys, monkeypatch):
    """One broken user profile is named on stderr (exit 1) and the other profiles are still listed."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "broken.toml").write_text("cpu = [not toml\n")
    (folder / "fine.toml").write_text('description = "fine"\ninherit = "latency"\n')
    monkeypatch.setenv("VMTUNE_PROFILES", str(folder))
    rc, out, err = run(capsys, "profiles")
    assert rc == 1
    assert [line.split()[0] for line in out.splitlines()] == ["balanced", "fine", "latency", "realtime", "throughput"]
    assert err.startswith("vmtune: error: profile broken: ") and len(err.splitlines()) == 1
    rc, out, err = run(capsys, "profiles", "--json")
    rows = {row["name"]: row for row in json.loads(out)}
    assert rc == 1 and "error" in rows["broken"] and rows["fine"]["cpu_pinning"] == "dedicated"


# -- a real process -----------------------------------------------------------------------------
def test_python_m_vmtune_prints_the_same_as_in_process(tmp_path, capsys):
    """`python -m vmtune rewrite` prints the same XML as the in-process CLI and exits 0."""
    rc, plain, _ = run(capsys, "rewrite", DB, *H, "--profile", "latency")
    proc = run_proc("rewrite", DB, *H, "--profile", "latency", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode() == plain
    assert all(line.startswith(b"vmtune: warning: ") for line in proc.stderr.splitlines())  # only warnings


def test_python_m_vmtune_reads_stdin(tmp_path):
    """`python -m vmtune rewrite -` reads the domain from a real stdin pipe."""
    proc = run_proc("rewrite", "-", *H, "--json", stdin=STOCK.read_bytes(), tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["profile"] == "latency"


@pytest.mark.parametrize("argv,rc,needle", [
    (["rewrite", "missing.xml", *H], 1, b"missing.xml"),
    (["rewrite", str(CORPUS / "domains" / "vm-xen-hvm.xml"), *H], 1, b"xen"),
    (["rewrite", "-", "-i", *H], 1, b"stdin"),
    (["rewrite", str(DB), *H, "--profile", "nosuch"], 1, b"nosuch"),
    (["rewrite", str(DB), *H, "-o", "/nonexistent-dir/out.xml"], 1, b"cannot write"),
    (["topology", "--sysfs", "/nonexistent-sysfs"], 1, b"sysfs"),
], ids=["missing", "xen", "in-place-stdin", "unknown-profile", "unwritable", "bad-sysfs"])
def test_python_m_vmtune_errors_have_no_traceback(argv, rc, needle, tmp_path):
    """As a real process, invalid input exits 1 with one `vmtune: error:` line and no traceback."""
    if "vm-xen-hvm.xml" in " ".join(argv) and not CORPUS.is_dir():
        pytest.skip("corpus not here")
    proc = run_proc(*argv, stdin=b"", tmp=tmp_path)
    assert proc.returncode == rc
    assert proc.stdout == b""
    assert proc.stderr.startswith(b"vmtune: error: ") and proc.stderr.count(b"\n") == 1, proc.stderr
    assert needle in proc.stderr and b"Traceback" not in proc.stderr


def test_python_m_vmtune_does_not_fit_is_exit_3(tmp_path):
    """As a real process, 40 latency vCPUs on the 32-CPU example host exit 3 and write no -o file."""
    path = tmp_path / "big.xml"
    path.write_text(db_with(">4</vcpu>", ">40</vcpu>"))
    proc = run_proc("rewrite", path, *H, "--profile", "latency", "-o", tmp_path / "out.xml", tmp=tmp_path)
    assert proc.returncode == 3
    assert proc.stderr.startswith(b"vmtune: error: ") and proc.stderr.count(b"\n") == 1
    assert not (tmp_path / "out.xml").exists()


def test_python_m_vmtune_usage_error_is_exit_2(tmp_path):
    """As a real process, a bad command line exits 2 with one line."""
    proc = run_proc("rewrite", tmp=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == b"vmtune: error: rewrite: the following arguments are required: DOMAIN.xml " \
        b"(see vmtune rewrite --help)\n"


@pytest.mark.parametrize("argv,what", [
    (["doctor", "--census-seconds", "-1"], "doctor: argument --census-seconds: -1: from 0 to 60 seconds"),
    (["doctor", "--census-seconds", "abc"], "doctor: argument --census-seconds: 'abc' is not a number"),
    (["doctor", "--census-seconds", "nan"], "doctor: argument --census-seconds: nan: from 0 to 60 seconds"),
    (["map", "--connect", "test:///default", "--host", str(HOST)], "map: --connect reads a live host"),
    (["hook", "reap", "--unit-dir", "/nowhere"], "hook reap: --unit-dir and --no-timer are install's"),
])
def test_options_that_would_be_ignored_are_usage_errors(argv, what, capsys):
    """An option the command would accept and ignore, or a value out of its range, is a usage
    error: one line, exit 2, nothing done."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.startswith(f"vmtune: error: {what}") and err.count("\n") == 1, err


def test_in_place_follows_a_symlink(tmp_path):
    """-i on a symlink rewrites the file it points to and leaves the link a link."""
    real = tmp_path / "real.xml"
    real.write_text(DB.read_text())
    link = tmp_path / "link.xml"
    link.symlink_to(real)
    assert cli.main(["rewrite", str(link), "-i", *H, "--profile", "latency"]) == 0
    assert link.is_symlink()
    assert "vmtune:tune" in real.read_text()


def test_library_api_survives_importing_the_cli():
    """vmtune.rewrite stays the function after every submodule is imported (no module shadows it)."""
    import vmtune
    import vmtune.cli  # noqa: F401
    import vmtune.driver  # noqa: F401
    import vmtune.hook  # noqa: F401

    assert callable(vmtune.rewrite) and vmtune.rewrite.__module__ == "vmtune.driver"
    assert set(vmtune.__all__) <= set(dir(vmtune))
    for name in vmtune.__all__:
        assert getattr(vmtune, name) is not None


def test_no_virtio_disk_name_left_is_one_line(tmp_path, capsys):
    """More disks to move than vda..vdzzz can name: one line, exit 1, no traceback."""
    taken = "".join(f"<disk type='file' device='disk'><source file='/v{i}'/><target dev='vd{d}' bus='virtio'/></disk>"
                    for i, d in enumerate(_names()))
    xml = (f"<domain type='kvm'><name>many</name><memory unit='MiB'>256</memory><vcpu>1</vcpu>"
           f"<os><type arch='x86_64' machine='pc'>hvm</type></os><devices>{taken}"
           "<disk type='file' device='disk'><source file='/ide'/><target dev='hda' bus='ide'/></disk></devices></domain>")
    path = tmp_path / "many.xml"
    path.write_text(xml)
    code = cli.main(["rewrite", str(path), "--profile", "balanced", "--host", str(EXAMPLES / "hosts" / "2node-smt.xml")])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "no virtio disk name is left for hda" in err, err


def _names():
    letters = "abcdefghijklmnopqrstuvwxyz"
    yield from letters
    yield from (a + b for a in letters for b in letters)
    yield from (a + b + c for a in letters for b in letters for c in letters)


def test_reserved_cpus_the_host_lacks_are_one_line(tmp_path, capsys):
    """Issue 27: ``reserved_cpus = "0-40"`` on a 32-CPU host is an error naming the file, the CPUs
    missing and the host's, for rewrite, topology and map alike."""
    config = tmp_path / "vmtune.toml"
    config.write_text('reserved_cpus = "0-40"\n')
    for argv in (["rewrite", str(DB), "--host", str(HOST)], ["topology", "--host", str(HOST)],
                 ["map", "--host", str(HOST)]):
        assert cli.main([*argv, "--config", str(config)]) == 1, argv
        out, err = capsys.readouterr()
        assert out == "" and err == (f"vmtune: error: {config}: reserved_cpus 0-40 names CPUs this host does not "
                                     "have (32-40; it has 0-31)\n"), err
