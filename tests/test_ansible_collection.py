"""The vmtune.kvm Ansible collection without libvirt: it builds, passes the sanity tests that run offline,
its docs match its arguments, and its modules read vmtune's JSON and exit codes (through a stand-in
``vmtune`` that prints what a test gives it). tests/test_ansible_libvirt.py runs it for real."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
import yaml
from fixtures.ansible_env import COLLECTION, ROOT, environ, playbook, task, tasks, tool

import vmtune
from vmtune import cli
from vmtune import config as config_mod

VMTUNE = Path(sys.executable).parent / "vmtune"
MODULES = ("domain", "plan", "doctor", "restart_libvirt")
# ansible-test's sanity tests that need no Python requirements: they run offline. The others
# (ansible-doc, import, pep8, pylint, validate-modules, yamllint, ...) bootstrap pip from the internet
# into a venv of their own; test_docs_match_arguments covers what validate-modules checks most.
OFFLINE_SANITY = ("action-plugin-docs", "compile", "empty-init", "ignores", "line-endings", "no-assert",
                  "no-get-exception", "no-illegal-filenames", "no-smart-quotes", "replace-urlopen", "shebang",
                  "symlinks", "use-argspec-type-path", "use-compat-six")


def test_galaxy_version_is_vmtunes():
    """The collection's version is vmtune's (vmtune.__version__, the one source)."""
    galaxy = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())
    assert (galaxy["namespace"], galaxy["name"], galaxy["version"]) == ("vmtune", "kvm", vmtune.__version__)


def test_collection_builds(tmp_path):
    """`ansible-galaxy collection build` makes a tarball with the modules, the role and the playbook."""
    proc = subprocess.run([str(tool("ansible-galaxy")), "collection", "build", str(COLLECTION), "--output-path",
                           str(tmp_path)], env=environ(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = tmp_path.glob("vmtune-kvm-*.tar.gz")
    assert built.name == f"vmtune-kvm-{vmtune.__version__}.tar.gz"
    with tarfile.open(built) as tar:
        names = set(tar.getnames())
    want = {"MANIFEST.json", "meta/runtime.yml", "roles/host/tasks/main.yml", "roles/host/handlers/main.yml",
            "roles/host/meta/argument_specs.yml", "playbooks/latency.yml", "plugins/module_utils/vmtune.py"}
    assert want | {f"plugins/modules/{m}.py" for m in MODULES} <= names


def test_sanity_offline(tmp_path):
    """`ansible-test sanity` passes, on a copy under a path ending in ansible_collections/vmtune/kvm, for every
    sanity test that runs offline."""
    copy = tmp_path / "ansible_collections" / "vmtune" / "kvm"
    shutil.copytree(COLLECTION, copy, ignore=shutil.ignore_patterns("__pycache__", "tests/output"))
    argv = [str(tool("ansible-test")), "sanity", "--python", f"{sys.version_info[0]}.{sys.version_info[1]}"]
    for name in OFFLINE_SANITY:
        argv += ["--test", name]
    proc = subprocess.run(argv, cwd=copy, env=environ(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = {line.split('"')[1] for line in proc.stdout.splitlines() if line.startswith("Running sanity test")}
    assert ran == set(OFFLINE_SANITY), ran


def _doc(tmp_path, kind: str, name: str) -> dict:
    proc = subprocess.run([str(tool("ansible-doc")), "-t", kind, "--json", name], env=environ(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)[name]


def _argument_spec(module: str) -> dict:
    """The argument_spec the module gives AnsibleModule (its main() run against a stand-in that stops there)."""
    from ansible.module_utils import basic

    class Stop(Exception):
        pass

    seen = {}

    def fake(argument_spec, **kwargs):
        seen.update(argument_spec)
        raise Stop

    sys.path.insert(0, str(COLLECTION.parents[2]))
    try:
        spec = importlib.util.spec_from_file_location(f"vmtune_kvm_{module}", COLLECTION / "plugins/modules" / f"{module}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.AnsibleModule = fake
        with pytest.raises(Stop):
            mod.main()
    finally:
        sys.path.remove(str(COLLECTION.parents[2]))
        assert basic.AnsibleModule is not fake
    return seen


@pytest.mark.parametrize("module", MODULES)
def test_docs_match_arguments(tmp_path, module):
    """ansible-doc reads each module's docs (fragment included), and they name exactly its arguments, with
    their types, defaults and choices."""
    doc = _doc(tmp_path, "module", f"vmtune.kvm.{module}")["doc"]
    options = doc["options"]
    spec = _argument_spec(module)
    assert set(options) == set(spec)
    for name, arg in spec.items():
        assert options[name].get("type", "str") == arg.get("type", "str"), name
        assert options[name].get("default") == arg.get("default"), name
        assert options[name].get("choices") == arg.get("choices"), name
        assert bool(options[name].get("required")) == bool(arg.get("required")), name


def test_role_docs(tmp_path):
    """ansible-doc reads the role's argument spec; every default in defaults/main.yml is documented."""
    doc = _doc(tmp_path, "role", "vmtune.kvm.host")
    options = doc["entry_points"]["main"]["options"]
    defaults = yaml.safe_load((COLLECTION / "roles/host/defaults/main.yml").read_text())
    assert set(defaults) == set(options)


# -- the modules against a stand-in vmtune --------------------------------------------------------------
FAKE = '''#!{python}
"""Stand-in vmtune: logs its argv and VMTUNE_* to $FAKE_LOG, prints $FAKE_OUT_<command>, exits $FAKE_RC_<command>;
writes $FAKE_PROM to the file of --prometheus."""
import json, os, sys
command = sys.argv[1]
with open(os.environ["FAKE_LOG"], "a") as fh:
    fh.write(json.dumps({{"argv": sys.argv[1:], "env": {{k: v for k, v in os.environ.items() if k.startswith("VMTUNE_")}}}}) + "\\n")
if "--prometheus" in sys.argv and "FAKE_PROM" in os.environ:
    with open(sys.argv[sys.argv.index("--prometheus") + 1], "w") as fh:
        fh.write(os.environ["FAKE_PROM"])
sys.stdout.write(os.environ.get("FAKE_OUT_" + command, ""))
sys.stderr.write(os.environ.get("FAKE_ERR_" + command, ""))
sys.exit(int(os.environ.get("FAKE_RC_" + command, "0")))
'''


@pytest.fixture
def fake_vmtune(tmp_path):
    path = tmp_path / "fake-vmtune"
    path.write_text(FAKE.format(python=sys.executable))
    path.chmod(0o755)
    log = tmp_path / "fake.log"

    def calls() -> list[dict]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return {"executable": str(path), "env": {"FAKE_LOG": str(log)}, "calls": calls}


def _row(**over) -> dict:
    row = {"name": "db1", "uuid": "u", "state": "running", "profile": "latency", "skipped": None, "changed": True,
           "defined": True, "original_saved": True, "changes": [{"element": "cputune"}], "placement": {},
           "warnings": [], "live": None, "notes": [], "before": "<domain>\n  <a passwd='s3cret'/>\n</domain>\n",
           "xml": "<domain>\n  <a passwd='s3cret'/>\n  <b/>\n</domain>\n", "diff": ""}
    row.update(over)
    return row


def test_domain_tuned_reads_apply_json(tmp_path, fake_vmtune):
    """state=tuned runs `vmtune apply --profile P --live --json -- NAME` (with --config and the originals dir);
    changed is apply's `defined`; diff mode gives both XMLs, passwords hidden."""
    args = {"name": "db1", "profile": "latency", "live": True, "executable": fake_vmtune["executable"],
            "config": "/x/vmtune.toml", "originals_dir": str(tmp_path / "orig")}
    unchanged = {"dry_run": False, "domains": [_row(changed=False, defined=False)]}
    first, second = tasks([
        {"module": "vmtune.kvm.domain", "args": args, "diff": True,
         "env": {"FAKE_OUT_apply": json.dumps({"dry_run": False, "domains": [_row()]})}},
        {"module": "vmtune.kvm.domain", "args": args, "env": {"FAKE_OUT_apply": json.dumps(unchanged)}},
    ], tmp_path, fake_vmtune["env"])
    assert first["changed"] and not first.get("failed"), first
    call = fake_vmtune["calls"]()[0]
    assert call["argv"] == ["apply", "--connect", "qemu:///system", "--profile", "latency", "--live",
                            "--config", "/x/vmtune.toml", "--json", "--", "db1"]
    assert call["env"] == {"VMTUNE_ORIGINALS_DIR": str(tmp_path / "orig")}
    assert first["diff"]["after"] == "<domain>\n  <a passwd='********'/>\n  <b/>\n</domain>\n"
    assert "+  <b/>" in first["unified_diff"]
    assert not second["changed"] and not second.get("failed"), second


def test_domain_check_mode_is_a_dry_run(tmp_path, fake_vmtune):
    """Check mode adds --dry-run, and with live asks the plan whether the running threads would move."""
    plan = {"problems": [{"kind": "not-live", "domains": ["db1"], "message": "m"}], "domains": [], "nodes": []}
    env = {**fake_vmtune["env"], "FAKE_OUT_apply": json.dumps({"dry_run": True, "domains": [_row(changed=False, defined=False)]}),
           "FAKE_OUT_plan": json.dumps(plan), "FAKE_RC_plan": "1"}
    args = {"name": "db1", "live": True, "executable": fake_vmtune["executable"]}
    result = task("vmtune.kvm.domain", args, tmp_path, check=True, env=env)
    assert result["changed"], result
    assert [c["argv"][0] for c in fake_vmtune["calls"]()] == ["apply", "plan"]
    assert "--dry-run" in fake_vmtune["calls"]()[0]["argv"]


def test_domain_failure_is_vmtunes_line(tmp_path, fake_vmtune):
    """vmtune's one-line error is the task's msg, as it is."""
    line = "vmtune: error: db1: does not fit: 4 dedicated vCPUs, 1 CPU free"
    env = {**fake_vmtune["env"], "FAKE_RC_apply": "3", "FAKE_ERR_apply": line + "\n"}
    result = task("vmtune.kvm.domain", {"name": "db1", "executable": fake_vmtune["executable"]}, tmp_path, env=env)
    assert result["failed"] and result["msg"] == line and result["rc"] == 3


def test_domain_untagged_and_reverted(tmp_path, fake_vmtune):
    """untag: changed when there was a tag (check mode: --dry-run); revert: changed only when an original is kept."""
    untag = {"name": "db1", "state": "untagged", "executable": fake_vmtune["executable"]}
    revert = {**untag, "state": "reverted"}
    none = {"name": "db1", "uuid": "u", "state": "shut off", "reverted": False, "original": False,
            "before": "<domain/>", "after": None}
    results = tasks([
        {"module": "vmtune.kvm.domain", "args": untag, "check": True,
         "env": {"FAKE_OUT_untag": json.dumps({"name": "db1", "uuid": "u", "previous": "latency"})}},
        {"module": "vmtune.kvm.domain", "args": untag,
         "env": {"FAKE_OUT_untag": json.dumps({"name": "db1", "uuid": "u", "previous": None})}},
        {"module": "vmtune.kvm.domain", "args": revert, "env": {"FAKE_OUT_revert": json.dumps(none)}},
        {"module": "vmtune.kvm.domain", "args": revert,
         "env": {"FAKE_OUT_revert": json.dumps({**none, "original": True, "after": "<domain><x/></domain>"})}},
    ], tmp_path, fake_vmtune["env"])
    assert [r["changed"] for r in results] == [True, False, False, True], results
    argvs = [c["argv"] for c in fake_vmtune["calls"]()]
    assert [a[0] for a in argvs] == ["untag", "untag", "revert", "revert", "revert"]
    assert ["--dry-run" in a for a in argvs] == [True, False, True, True, False]  # the last: the revert itself


def test_plan_facts_and_problems(tmp_path, fake_vmtune):
    """plan: the JSON as the fact vmtune_plan; a problem fails the task unless fail_on_problems is false."""
    plan = {"ok": False, "domains": [{"name": "db1"}], "nodes": [],
            "problems": [{"kind": "cpu-overlap", "domains": ["a", "b"], "message": "a and b share CPU 1"}]}
    out = {"FAKE_OUT_plan": json.dumps(plan), "FAKE_RC_plan": "1"}
    down = {"FAKE_RC_plan": "4", "FAKE_ERR_plan": "vmtune: error: cannot connect to libvirt at qemu:///system: x\n"}
    args = {"executable": fake_vmtune["executable"]}
    failing, facts, error = tasks([
        {"module": "vmtune.kvm.plan", "args": args, "env": out},
        {"module": "vmtune.kvm.plan", "args": {**args, "fail_on_problems": False}, "env": out},
        {"module": "vmtune.kvm.plan", "args": args, "env": down},
    ], tmp_path, fake_vmtune["env"])
    assert failing["failed"] and failing["msg"] == "vmtune plan: 1 problem(s): cpu-overlap: a and b share CPU 1"
    assert not facts.get("failed") and facts["ansible_facts"]["vmtune_plan"] == plan
    assert error["failed"] and error["msg"] == "vmtune: error: cannot connect to libvirt at qemu:///system: x"


def test_doctor_facts_and_fails(tmp_path, fake_vmtune):
    """doctor: the report as the fact vmtune_doctor; a FAIL finding fails the task; --prometheus passed on."""
    finding = {"level": "FAIL", "area": "virt", "source": "/dev/kvm", "found": "missing", "want": "", "fix": ""}
    report = {"ok": False, "counts": {"FAIL": 1}, "findings": [finding]}
    env = {**fake_vmtune["env"], "FAKE_OUT_doctor": json.dumps(report), "FAKE_RC_doctor": "1"}
    args = {"executable": fake_vmtune["executable"], "measure": False, "prometheus": "/x/vmtune.prom"}
    failing, facts = tasks([{"module": "vmtune.kvm.doctor", "args": args},
                            {"module": "vmtune.kvm.doctor", "args": {**args, "fail_on_fail": False}}], tmp_path, env)
    assert failing["failed"] and failing["msg"] == "vmtune doctor: 1 FAIL finding(s): virt /dev/kvm: missing"
    assert fake_vmtune["calls"]()[0]["argv"] == ["doctor", "--no-measure", "--prometheus", "/x/vmtune.prom", "--json"]
    assert not facts.get("failed") and facts["ansible_facts"]["vmtune_doctor"] == report


def test_doctor_fails_on_vmtunes_error_line_whatever_the_exit_code(tmp_path, fake_vmtune):
    """vmtune prints the report, then cannot write the metrics (`vmtune: error: cannot write ...`, exit 1, as a
    FAIL finding also exits): the task fails with that line, though JSON came back and 1 is a doctor's code."""
    report = {"ok": True, "counts": {"OK": 1}, "findings": []}
    line = "vmtune: error: cannot write /x/vmtune.prom: No such file or directory"
    env = {**fake_vmtune["env"], "FAKE_OUT_doctor": json.dumps(report), "FAKE_RC_doctor": "1",
           "FAKE_ERR_doctor": line + "\n"}
    args = {"executable": fake_vmtune["executable"], "measure": False, "prometheus": "/x/vmtune.prom", "fail_on_fail": False}
    result = task("vmtune.kvm.doctor", args, tmp_path, env=env)
    assert result.get("failed") and result["msg"] == line and result["rc"] == 1, result


def test_doctor_module_fails_when_the_metrics_file_cannot_be_written(tmp_path):
    """The real vmtune, `prometheus: FILE` in a missing folder: the task fails with vmtune's line, no file."""
    target = tmp_path / "no-such-dir" / "vmtune.prom"
    result = task("vmtune.kvm.doctor", {"executable": str(VMTUNE), "measure": False, "fail_on_fail": False,
                                        "prometheus": str(target)}, tmp_path)
    assert not target.exists()
    assert result.get("failed"), {k: v for k, v in result.items() if k != "ansible_facts"}
    assert result["msg"].startswith("vmtune: error: cannot write "), result["msg"]


def test_domain_name_is_never_read_as_an_option(tmp_path, fake_vmtune):
    """libvirt accepts a domain named `--all`: `name: --all` means that domain, never `vmtune apply --all`.
    Every argv the module builds, for each state, run and in check mode (one playbook), is parsed by
    vmtune's own parser."""
    outs = {"FAKE_OUT_untag": json.dumps({"name": "--all", "uuid": "u", "previous": "latency"}),
            "FAKE_OUT_revert": json.dumps({"name": "--all", "uuid": "u", "state": "shut off", "reverted": False,
                                           "original": True, "before": "<domain/>", "after": "<domain/>"})}
    steps = [{"module": "vmtune.kvm.domain", "args": {"name": "--all", "state": state,
                                                      "executable": fake_vmtune["executable"]}, "check": check,
              "env": {**outs, "FAKE_OUT_apply": json.dumps({"dry_run": check, "domains": [_row(name="--all")]})}}
             for state in ("tuned", "untagged", "reverted") for check in (True, False)]
    tasks(steps, tmp_path, fake_vmtune["env"])
    calls = fake_vmtune["calls"]()
    assert {c["argv"][0] for c in calls} == {"apply", "untag", "revert"}, calls
    applies = [c["argv"] for c in calls if c["argv"][0] == "apply"]
    assert sorted("--dry-run" in a for a in applies) == [False, True], applies  # check mode, then a run
    for call in calls:
        try:
            args = cli.parser().parse_args(call["argv"])
        except SystemExit:
            pytest.fail(f"vmtune cannot parse {call['argv']}")
        named = args.names if call["argv"][0] == "apply" else [args.name]
        assert named == ["--all"] and not getattr(args, "all", False), call["argv"]
        assert args.json and args.connect == "qemu:///system", call["argv"]


def _redact():
    sys.path.insert(0, str(COLLECTION.parents[2]))
    try:
        from ansible_collections.vmtune.kvm.plugins.module_utils.vmtune import redact
    finally:
        sys.path.remove(str(COLLECTION.parents[2]))
    return redact


def test_domain_module_never_returns_a_graphics_password(tmp_path, fake_vmtune):
    """The docs say passwords are shown as ********: the registered result (what -v prints, what a callback
    ships) holds none, not in unified_diff, not in diff, not in `vmtune` (apply's before, xml and diff), for
    state tuned and reverted (one playbook)."""
    secret = "<domain>\n  <graphics passwd=\"it's-s3cret\"/>\n  <a passwd='s3cret'/>\n</domain>\n"
    row = _row(before=secret, xml=secret + "<b/>\n", diff="-  <graphics passwd=\"it's-s3cret\"/>\n")
    reverted = {"name": "db1", "uuid": "u", "state": "shut off", "reverted": True, "original": True,
                "before": secret, "after": secret.replace("<domain>", "<domain type='kvm'>")}
    env = {"FAKE_OUT_apply": json.dumps({"dry_run": False, "domains": [row]}),
           "FAKE_OUT_revert": json.dumps(reverted)}
    results = tasks([{"module": "vmtune.kvm.domain", "diff": True, "env": env,
                      "args": {"name": "db1", "state": state, "executable": fake_vmtune["executable"]}}
                     for state in ("tuned", "reverted")], tmp_path, fake_vmtune["env"])
    assert len(results) == 2
    for result in results:
        assert result["changed"] and not result.get("failed"), result
        assert "s3cret" not in json.dumps(result), [k for k, v in result.items() if "s3cret" in json.dumps(v)]
        assert "passwd='********'" in json.dumps(result["vmtune"])


@pytest.mark.parametrize("attr, hidden", [
    ("passwd=\"it's-secret\"", "passwd=\"********\""),
    ("passwd='say \"secret\"'", "passwd='********'"),
    ("passwd = 'secret'", "passwd = '********'"),
    ("passwd=''", "passwd='********'"),
])
def test_redact_matches_each_quote_style(attr, hidden):
    """Each quote style ends only at its own quote: the other one inside the value stays hidden."""
    assert _redact()(f"<graphics type='vnc' {attr} port='5900'/>") == f"<graphics type='vnc' {hidden} port='5900'/>"


def test_redact_hides_a_password_lxml_wrote():
    """apply --json's `before` and `xml` go through lxml, which writes passwd="it's" (double quotes, the
    apostrophe raw): the redaction still hides it."""
    from vmtune.xml import xmlsafe
    from vmtune.driver import serialize

    xml = serialize(xmlsafe.parse("<domain><devices><graphics type='vnc' passwd='it&apos;s-secret'/>"
                                  "</devices></domain>", "domain XML"))
    assert "it's-secret" in xml
    assert "secret" not in _redact()(xml)


def test_doctor_is_changed_when_its_metrics_changed(tmp_path, fake_vmtune):
    """prometheus: FILE is the doctor's one change: changed when the file is new or its metrics differ, not when
    only the report's timestamp moved; check mode writes nothing and changes nothing."""
    report = {"ok": True, "counts": {"OK": 1}, "findings": []}
    target = tmp_path / "vmtune.prom"

    def prom(stamp, ok):
        return f"# TYPE vmtune_doctor_ok gauge\nvmtune_doctor_ok {ok}\nvmtune_doctor_timestamp_seconds {stamp}\n"

    args = {"executable": fake_vmtune["executable"], "measure": False, "prometheus": str(target)}
    steps = [{"module": "vmtune.kvm.doctor", "args": args, "env": {"FAKE_PROM": text}, "check": check}
             for text, check in ((prom(1, 1), False), (prom(2, 1), False), (prom(3, 0), False), (prom(4, 1), True))]
    results = tasks(steps, tmp_path, {**fake_vmtune["env"], "FAKE_OUT_doctor": json.dumps(report)})
    assert [r["changed"] for r in results] == [True, False, True, False], results
    assert target.read_text() == prom(3, 0)
    assert ["--prometheus" in c["argv"] for c in fake_vmtune["calls"]()] == [True, True, True, False]


def test_latency_playbook_reads_the_plan_fact(tmp_path, fake_vmtune):
    """The playbook reads ansible_facts['vmtune_plan'], so it works where facts are not injected as variables
    (INJECT_FACTS_AS_VARS=false): it applies the matching domains only, each after `--`."""
    plan = {"ok": True, "problems": [], "nodes": [], "domains": [{"name": "db-1"}, {"name": "web"}, {"name": "db-2"}]}
    env = {**fake_vmtune["env"], "FAKE_OUT_plan": json.dumps(plan),
           "FAKE_OUT_apply": json.dumps({"dry_run": False, "domains": [_row()]}), "ANSIBLE_INJECT_FACT_VARS": "false"}
    book = COLLECTION / "playbooks" / "latency.yml"
    run = playbook(book, tmp_path, {"vmtune_pattern": "db-", "vmtune_hosts": "localhost",
                                    "vmtune_module_defaults": {"executable": fake_vmtune["executable"]}}, env=env)
    assert run.rc == 0, run.out + run.err
    applied = [c["argv"][-1] for c in fake_vmtune["calls"]() if c["argv"][0] == "apply"]
    assert applied == ["db-1", "db-2"], fake_vmtune["calls"]()


def test_missing_vmtune_is_one_message(tmp_path):
    """No vmtune on the host: the task says so and how to get it."""
    result = task("vmtune.kvm.plan", {"executable": str(tmp_path / "nothing-here")}, tmp_path)
    assert result["failed"]
    where = [Path(d, "vmtune") for d in ("/usr/bin", "/bin", "/opt/vmtune/bin", "/usr/local/bin")]
    if any(p.exists() for p in where):
        pytest.skip(f"vmtune is installed on this machine ({[str(p) for p in where if p.exists()]})")
    result = task("vmtune.kvm.plan", {}, tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert result["failed"] and "vmtune is not installed here" in result["msg"], result


# -- the role's configuration file ------------------------------------------------------------------------
def test_role_writes_a_config_vmtune_reads(tmp_path):
    """The role's template turns vmtune_config into a TOML file that vmtune's own loader accepts, key for key."""
    want = {"reserved_cpus": "0,16", "placement": "pack", "smt": {"latency": "isolate"},
            "hook": {"on_conflict": "warn", "max_cstate_latency_us": 20, "lock_timeout_s": 2.5, "isolate": "off"}}
    dest = tmp_path / "vmtune.toml"
    book = tmp_path / "render.yml"
    book.write_text(textwrap.dedent(f"""\
        - hosts: localhost
          gather_facts: false
          vars:
            vmtune_config: {json.dumps(want)}
          tasks:
            - ansible.builtin.template:
                src: {COLLECTION / "roles/host/templates/vmtune.toml.j2"}
                dest: {dest}
                mode: "0644"
        """))
    run = playbook(book, tmp_path)
    assert run.rc == 0, run.out + run.err
    cfg = config_mod.load(str(dest))
    assert (cfg.placement, sorted(cfg.reserved_cpus), cfg.smt, cfg.hook) == (
        "pack", [0, 16], want["smt"], config_mod.HookSettings(**want["hook"]))


# -- the role's install -----------------------------------------------------------------------------------
def _role_book(tmp: Path, where: Path, name: str, **over) -> Path:
    """A play of the role on localhost with every path under ``where``, libvirt never restarted."""
    settings = {"vmtune_venv": str(where / "venv"), "vmtune_python": sys.executable,
                "vmtune_wheel_dir": str(where / "wheels"), "vmtune_link": "", "vmtune_extras": [],
                "vmtune_system_packages": [], "vmtune_config_path": str(where / "etc" / "vmtune.toml"),
                "vmtune_hooks_dir": str(where / "hooks"), "vmtune_restart_libvirt": False,
                "vmtune_unit_dir": str(where / "units"), "vmtune_cron_file": str(where / "cron.d" / "vmtune"), **over}
    book = tmp / name
    book.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False,
                                 "roles": [{"role": "vmtune.kvm.host", "vars": settings}]}]))
    return book


def test_role_without_a_wheel_or_package_fails_first(tmp_path):
    """No wheel and no vmtune_package: the role fails before it installs anything, saying what to give
    (vmtune is not on PyPI; pip would install whatever is there under that name)."""
    where = tmp_path / "host"
    run = playbook(_role_book(tmp_path, where, "role.yml"), tmp_path)
    assert run.rc != 0 and run.recap["failed"] == 1, run.out
    assert "vmtune_wheel" in run.out and "vmtune_package" in run.out, run.out
    assert not where.exists(), list(where.rglob("*"))


def _fleets_plays() -> list:
    text = (ROOT / "docs" / "fleets.md").read_text()
    section = text.split("\n## The Ansible collection\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    return yaml.safe_load(block)


def test_fleets_example_installs_what_its_tasks_need():
    """docs/fleets.md's two plays: a doctor task with `prometheus:` needs the prometheus extra from the role (else vmtune
    exits 4), and the role is given a wheel or a package (it has no default)."""
    plays = _fleets_plays()
    wants = any("prometheus" in (t.get("vmtune.kvm.doctor") or {}) for p in plays for t in p.get("tasks", []))
    defaults = yaml.safe_load((COLLECTION / "roles/host/defaults/main.yml").read_text())
    roles = [role.get("vars", {}) for play in plays for role in play.get("roles", [])]
    assert wants and roles
    for given in roles:
        assert "prometheus" in given.get("vmtune_extras", defaults["vmtune_extras"]), given
        assert given.get("vmtune_wheel") or given.get("vmtune_package"), given
