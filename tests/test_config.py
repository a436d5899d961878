"""The host configuration (vmtune/config.py): where it is read from, what it accepts, and what it
changes in a rewrite."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import jsonschema
import pytest

from vmtune import cli, config, schema
from vmtune.config import Config
from vmtune.errors import InvalidInput
from vmtune.roots import Roots
from fixtures.schema_paths import jsonschema_paths as _paths
from fixtures.schema_paths import keywords

ROOT = Path(__file__).resolve().parent.parent
HOST = ROOT / "examples" / "hosts" / "2node-smt.xml"
DB = ROOT / "examples" / "db-4vcpu.xml"
H = ["--host", str(HOST)]
SCHEMA = schema.load("config.schema.json")
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

FULL = """\
reserved_cpus = "0-1, 16-17,^1"
placement = "pack"
profiles_dir = "/srv/vmtune/profiles"

[smt]
latency = "isolate"
realtime = "threads"

[hook]
on_conflict = "warn"
max_cstate_latency_us = 10
cstate_scope = "pinned"
ksm = "off"
"""


# The default path points at a missing file and $VMTUNE_CONFIG / $VMTUNE_PROFILES are neutral (fixtures/cli.py).
pytestmark = pytest.mark.usefixtures("no_machine_config")


def write(tmp_path: Path, text: str, name: str = "vmtune.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path) -> str:
    with pytest.raises(InvalidInput) as exc:
        config.load(str(path))
    return str(exc.value)


def run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def pins_of(capsys, *argv) -> set[int]:
    rc, out, err = run(capsys, "rewrite", DB, *H, "--profile", "latency", "--json", *argv)
    assert rc == 0, err
    return {int(c) for c in json.loads(out)["placement"]["vcpupins"].values()}


# -- where the config comes from ----------------------------------------------------------------
def test_missing_default_file_gives_the_defaults():
    """With no default file and no $VMTUNE_CONFIG the config is the defaults."""
    cfg = config.load()
    assert cfg == Config()
    assert cfg.reserved_cpus is None and cfg.placement == "spread" and cfg.source is None


def test_existing_default_file_is_read(tmp_path, monkeypatch):
    """The default path is read when it exists and no other file is named."""
    path = write(tmp_path, 'placement = "pack"\n')
    monkeypatch.setattr(config, "DEFAULT_PATH", str(path))
    cfg = config.load()
    assert cfg.placement == "pack" and cfg.source == str(path)


def test_explicit_missing_file_is_an_error(tmp_path):
    """A config file named explicitly that does not exist is an invalid input naming it."""
    path = tmp_path / "nope.toml"
    assert str(path) in error_of(path) and "does not exist" in error_of(path)


def test_vmtune_config_env_is_honoured(tmp_path, monkeypatch):
    """$VMTUNE_CONFIG names the config file when no path is given."""
    path = write(tmp_path, 'reserved_cpus = "2-3"\n')
    monkeypatch.setenv("VMTUNE_CONFIG", str(path))
    cfg = config.load(Roots.from_env(os.environ).config)  # the edges read the environment
    assert cfg.reserved_cpus == frozenset({2, 3}) and cfg.source == str(path)


def test_vmtune_config_env_naming_a_missing_file_is_an_error(tmp_path, monkeypatch):
    """$VMTUNE_CONFIG naming a missing file is explicit, so it is an error, not the defaults."""
    monkeypatch.setenv("VMTUNE_CONFIG", str(tmp_path / "gone.toml"))
    with pytest.raises(InvalidInput, match="gone.toml"):
        config.load(Roots.from_env(os.environ).config)


def test_explicit_path_wins_over_the_environment(tmp_path, monkeypatch):
    """A path given to load() (--config) is read instead of $VMTUNE_CONFIG."""
    monkeypatch.setenv("VMTUNE_CONFIG", str(write(tmp_path, 'placement = "pack"\n', "env.toml")))
    assert config.load(str(write(tmp_path, 'placement = "spread"\n', "arg.toml"))).placement == "spread"


def test_unreadable_config_is_an_error(tmp_path):
    """A config path that cannot be read (a directory) is an invalid input."""
    folder = tmp_path / "dir.toml"
    folder.mkdir()
    assert "cannot read config" in error_of(folder)


# -- what it accepts ----------------------------------------------------------------------------
def test_empty_file_gives_defaults_with_its_source(tmp_path):
    """An empty config file gives the default values and records where it came from."""
    path = write(tmp_path, "")
    cfg = config.load(str(path))
    assert (cfg.reserved_cpus, cfg.placement, cfg.profiles_dir, cfg.smt, cfg.hook) == (
        None, "spread", None, {}, config.HookSettings())
    assert cfg.source == str(path)


def test_every_key_is_read(tmp_path):
    """Every key of a full config ends up in Config, with reserved_cpus parsed as a cpulist."""
    cfg = config.load(str(write(tmp_path, FULL)))
    assert cfg.reserved_cpus == frozenset({0, 16, 17})
    assert cfg.placement == "pack"
    assert cfg.profiles_dir == "/srv/vmtune/profiles"
    assert cfg.smt == {"latency": "isolate", "realtime": "threads"}
    assert cfg.hook == config.HookSettings(on_conflict="warn", max_cstate_latency_us=10, cstate_scope="pinned", ksm="off")


@pytest.mark.parametrize("text,cpus", [
    ("0-3", {0, 1, 2, 3}),
    ("0-7,^3,12", {0, 1, 2, 4, 5, 6, 7, 12}),
    (" 1 , 5 ", {1, 5}),
    ("", set()),
])
def test_reserved_cpus_is_parsed(tmp_path, text, cpus):
    """reserved_cpus is read as a libvirt cpulist; an empty string reserves nothing (not the default)."""
    cfg = config.load(str(write(tmp_path, f'reserved_cpus = "{text}"\n')))
    assert cfg.reserved_cpus == frozenset(cpus)


def test_malformed_toml_names_the_line(tmp_path):
    """A TOML syntax error names the config file and the line."""
    path = write(tmp_path, 'placement = "pack"\n\nreserved_cpus = "0-3\n')
    message = error_of(path)
    assert message.startswith(f"{path}: ") and "line 3" in message


@pytest.mark.parametrize("text,where", [
    ('placement = "pack"\nbogus = 1\n', ":2: bogus is not a known key"),
    ('reserved_cpus = 3\n', ":1: reserved_cpus must be string"),
    ('reserved_cpus = "0-3;4"\n', ":1: reserved_cpus does not match"),
    ('placement = "random"\n', ":1: placement must be one of"),
    ('[hook]\nksm = "off"\n[smt]\nlatency = "bogus"\n', ":4: smt.latency must be one of"),
    ('[smt]\nksm = "isolate"\n[hook]\nksm = "maybe"\n', ":4: hook.ksm must be one of"),
    ('[hook]\nmax_cstate_latency_us = -1\n', ":2: hook.max_cstate_latency_us must be >= 0"),
    ('[hook]\nbogus = 1\n', ":2: hook.bogus is not a known key"),
    ('smt = "isolate"\n', ":1: smt must be object"),
], ids=["unknown-key", "wrong-type", "pattern", "enum", "smt-value", "same-key-in-earlier-table",
        "minimum", "unknown-hook-key", "table-as-string"])
def test_schema_errors_name_file_and_line(tmp_path, text, where):
    """A config breaking config.schema.json is refused with `FILE:LINE: key problem`."""
    path = write(tmp_path, text)
    assert error_of(path).startswith(f"{path}{where}")


@pytest.mark.parametrize("text", ["3-1", "1--2", "0-99999999"])
def test_bad_cpulist_names_file_and_line(tmp_path, text):
    """A reserved_cpus the schema pattern lets through but that is no cpulist names file and line."""
    path = write(tmp_path, f'placement = "pack"\nreserved_cpus = "{text}"\n')
    assert error_of(path).startswith(f"{path}:2: reserved_cpus")


# -- the schema ---------------------------------------------------------------------------------
def test_config_schema_is_valid_and_inside_the_supported_subset():
    """config.schema.json is a valid 2020-12 schema using only keywords vmtune.schema implements."""
    jsonschema.Draft202012Validator.check_schema(SCHEMA)

    assert keywords(SCHEMA) <= schema.SUPPORTED


@pytest.mark.parametrize("data,valid", [
    (tomllib.loads(FULL), True),
    ({}, True),
    ({"reserved_cpus": ""}, True),
    ({"reserved_cpus": "0-3,^2"}, True),
    ({"smt": {}}, True),
    ({"smt": {"anything": "threads"}}, True),
    ({"hook": {"max_cstate_latency_us": 0}}, True),
    ({"reserved_cpus": "0-3;4"}, False),
    ({"reserved_cpus": "a"}, False),
    ({"reserved_cpus": 3}, False),
    ({"reserved_cpus": ["0"]}, False),
    ({"placement": "random"}, False),
    ({"placement": 1}, False),
    ({"profiles_dir": 7}, False),
    ({"smt": {"latency": "bogus"}}, False),
    ({"smt": {"latency": True}}, False),
    ({"smt": "threads"}, False),
    ({"hook": {"max_cstate_latency_us": -1}}, False),
    ({"hook": {"max_cstate_latency_us": 1.5}}, False),
    ({"hook": {"max_cstate_latency_us": False}}, False),
    ({"hook": {"ksm": True}}, False),
    ({"hook": {"x": 1}}, False),
    ({"bogus": 1}, False),
], ids=lambda v: json.dumps(v) if not isinstance(v, bool) else str(v))
def test_mini_validator_agrees_with_jsonschema_on_configs(data, valid):
    """vmtune.schema.errors and `jsonschema` give the same verdict, at the same keys, on each sample."""
    assert VALIDATOR.is_valid(data) is valid
    assert (schema.errors(data, SCHEMA) == []) is valid
    assert {path for path, _ in schema.errors(data, SCHEMA)} == jsonschema_paths(data)


def jsonschema_paths(data) -> set[str]:
    return _paths(VALIDATOR, data)


# -- what it changes ----------------------------------------------------------------------------
def test_reserved_cpus_change_the_vcpu_pins(tmp_path, capsys):
    """A config's reserved_cpus keeps `vmtune rewrite --json` vCPU pins off those CPUs."""
    reserved = {0, 1, 2, 3, 4, 5, 8, 16, 17, 18, 19, 20, 21, 24}
    default = pins_of(capsys)
    assert default & reserved  # without the config the pins would use some of them
    path = write(tmp_path, 'reserved_cpus = "0-5,16-21,8,24"\n')
    pins = pins_of(capsys, "--config", path)
    assert len(pins) == 4 and not pins & reserved


def test_reserved_cpus_from_vmtune_config_env_change_the_pins(tmp_path, capsys, monkeypatch):
    """$VMTUNE_CONFIG is read by `vmtune rewrite` too: its reserved_cpus keep the pins off them."""
    monkeypatch.setenv("VMTUNE_CONFIG", str(write(tmp_path, 'reserved_cpus = "0-7,16-23"\n')))
    pins = pins_of(capsys)
    assert len(pins) == 4 and pins <= set(range(8, 16)) | set(range(24, 32))


def test_reserving_every_cpu_makes_a_latency_domain_not_fit(tmp_path, capsys):
    """With every host CPU reserved a dedicated-CPU domain does not fit: exit 3."""
    path = write(tmp_path, 'reserved_cpus = "0-31"\n')
    rc, out, err = run(capsys, "rewrite", DB, *H, "--profile", "latency", "--config", path)
    assert rc == 3 and out == "" and err.startswith("vmtune: error: ")


def test_reserved_cpus_show_in_topology(tmp_path, capsys):
    """`vmtune topology --json` reports the config's reserved CPUs instead of the default."""
    path = write(tmp_path, 'reserved_cpus = "0-1,16-17"\n')
    rc, out, err = run(capsys, "topology", *H, "--json", "--config", path)
    assert rc == 0, err
    assert json.loads(out)["reserved"] == "0-1,16-17"


@pytest.mark.parametrize("placement,node", [("spread", 0), ("pack", 1)])
def test_placement_picks_the_node_with_most_or_fewest_free_cpus(tmp_path, capsys, placement, node):
    """spread puts the domain on the node with most free dedicated CPUs, pack on the one with fewest."""
    path = write(tmp_path, f'reserved_cpus = "0,16,8-11,24-27"\nplacement = "{placement}"\n')
    rc, out, err = run(capsys, "rewrite", DB, *H, "--profile", "latency", "--json", "--config", path)
    assert rc == 0, err
    assert json.loads(out)["placement"]["nodes"] == [node]


def test_smt_override_isolates_latency_vcpus(tmp_path, capsys):
    """`[smt] latency = "isolate"` puts each latency vCPU on a physical core of its own."""
    assert len({c % 16 for c in pins_of(capsys)}) == 2  # threads: vCPU pairs share cores
    path = write(tmp_path, '[smt]\nlatency = "isolate"\n')
    assert len({c % 16 for c in pins_of(capsys, "--config", path)}) == 4


def test_profiles_dir_is_where_rewrite_finds_user_profiles(tmp_path, capsys):
    """A config's profiles_dir is searched for --profile names."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "tight.toml").write_text('inherit = "latency"\n[cpu]\nsmt = "isolate"\n')
    path = write(tmp_path, f'profiles_dir = "{folder}"\n')
    rc, out, err = run(capsys, "rewrite", DB, *H, "--profile", "tight", "--json", "--config", path)
    assert rc == 0, err
    assert json.loads(out)["profile"] == "tight"


@pytest.mark.parametrize("command", [["rewrite", str(DB), *H], ["topology", *H], ["profiles"]])
def test_malformed_config_fails_every_command_with_one_line(tmp_path, capsys, command):
    """Each command given a bad --config exits 1 with one error line naming the file and line."""
    path = write(tmp_path, 'placement = "pack"\nbogus = true\n')
    rc, out, err = run(capsys, *command, "--config", path)
    assert rc == 1 and out == ""
    assert err == f"vmtune: error: {path}:2: bogus is not a known key\n"
