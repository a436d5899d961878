"""Tuning profiles (vmtune/profiles.py, vmtune/profiles/): the built-ins, user profiles,
inheritance, and the schema check behind them."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmtune import cli, profiles, schema
from vmtune.errors import InvalidInput
from vmtune.profiles import BUILTIN, Profile
from fixtures.schema_paths import jsonschema_paths as _paths
from fixtures.schema_paths import keywords

ROOT = Path(__file__).resolve().parent.parent
HOST = ROOT / "examples" / "hosts" / "2node-smt.xml"
DB = ROOT / "examples" / "db-4vcpu.xml"
SCHEMA = schema.load("profile.schema.json")
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


@pytest.fixture(autouse=True)
def no_machine_profiles(tmp_path_factory, monkeypatch):
    """$VMTUNE_PROFILES (read by the CLI) and the default folder (the library's) point at an empty
    directory unless a test sets its own."""
    empty = str(tmp_path_factory.mktemp("no-profiles"))
    monkeypatch.setenv("VMTUNE_PROFILES", empty)
    monkeypatch.setattr(profiles, "USER_DIR", empty)
    monkeypatch.delenv("VMTUNE_CONFIG", raising=False)


@pytest.fixture
def user_dir(tmp_path, monkeypatch) -> Path:
    """A user profile directory, named by $VMTUNE_PROFILES and as the default folder."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    monkeypatch.setenv("VMTUNE_PROFILES", str(folder))
    monkeypatch.setattr(profiles, "USER_DIR", str(folder))
    return folder


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def builtin_text(name: str) -> str:
    return resources.files("vmtune").joinpath("profiles", f"{name}.toml").read_text("utf-8")


def error_of(name: str, user_dir: str | None = None) -> str:
    with pytest.raises(InvalidInput) as exc:
        profiles.load(name, user_dir)
    return str(exc.value)


# -- built-ins ----------------------------------------------------------------------------------
def test_builtin_files_are_exactly_the_builtin_names():
    """The TOML files shipped in vmtune/profiles/ are exactly profiles.BUILTIN."""
    shipped = {p.name[:-5] for p in resources.files("vmtune").joinpath("profiles").iterdir()
               if p.name.endswith(".toml")}
    assert shipped == set(BUILTIN)
    assert profiles.DEFAULT in BUILTIN


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_raw_toml_validates_with_jsonschema(name):
    """Each built-in profile's raw TOML table is valid for profile.schema.json per `jsonschema`."""
    jsonschema.validate(tomllib.loads(builtin_text(name)), SCHEMA)


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_loads_with_a_description_and_typed_values(name):
    """Each built-in loads as a Profile whose values have the types of the dataclass defaults (an
    optional value, whose default is None: None or the type it is declared with)."""
    prof = profiles.load(name)
    assert prof.name == name and prof.description
    for f in dataclasses.fields(Profile):
        value = getattr(prof, f.name)
        if f.default is None:
            assert value is None or f.type == f"{type(value).__name__} | None", f.name
        elif f.name != "name":
            assert type(value) is type(f.default), f.name


def test_profile_schema_is_a_valid_2020_12_schema():
    """profile.schema.json is itself a valid draft 2020-12 JSON Schema."""
    assert SCHEMA["$schema"].endswith("2020-12/schema")
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_profile_schema_uses_only_keywords_the_mini_validator_knows():
    """profile.schema.json stays inside the keyword subset vmtune.schema implements."""
    assert keywords(SCHEMA) <= schema.SUPPORTED


def test_schema_keys_and_profile_fields_match_one_to_one():
    """Every schema key flattens to a Profile field and every Profile field (but name) has a schema key."""
    from_schema = set()
    for key, sub in SCHEMA["properties"].items():
        if sub.get("type") == "object":
            from_schema |= {f"{key}_{k}" for k in sub["properties"]}
        elif key != "inherit":
            from_schema.add(key)
    assert from_schema == {f.name for f in dataclasses.fields(Profile)} - {"name"}


def test_realtime_inherits_latency_and_overrides_its_own_keys():
    """realtime takes latency's values except the keys it sets itself."""
    latency, realtime = profiles.load("latency"), profiles.load("realtime")
    own = {"description", "cpu_smt", "cpu_scheduler", "cpu_priority", "cpu_pmu", "memory_locked",
           "power_max_cstate_latency_us", "power_min_freq"}
    for key, value in latency.to_dict().items():
        if key not in own | {"name"}:
            assert getattr(realtime, key) == value, key
    assert (realtime.cpu_smt, realtime.cpu_scheduler, realtime.cpu_pmu, realtime.memory_locked) == (
        "isolate", "fifo", "off", True)
    assert (realtime.power_max_cstate_latency_us, realtime.power_min_freq) == (0, "max")  # POLL only, full speed
    assert (latency.power_max_cstate_latency_us, latency.power_min_freq) == (None, "base")  # the config's cap
    assert realtime.description != latency.description


def test_balanced_overrides_throughputs_pinning():
    """balanced inherits throughput but floats its vCPUs instead of pinning them to a node."""
    balanced, throughput = profiles.load("balanced"), profiles.load("throughput")
    assert throughput.cpu_pinning == "node" and balanced.cpu_pinning == "float"
    assert balanced.devices_virtio == throughput.devices_virtio is True
    assert not balanced.dedicated and profiles.load("latency").dedicated


# -- the mini validator agrees with jsonschema ---------------------------------------------------
VALID = [
    {},
    {"description": "x", "inherit": "latency"},
    {"host_tuning": True},
    {"cpu": {"mode": "host", "pinning": "dedicated", "smt": "isolate", "scheduler": "rr"}},
    {"cpu": {"priority": 1}},
    {"cpu": {"priority": 99}},
    {"cpu": {"kvm_hint_dedicated": False, "kvm_poll_control": True, "pmu": "off"}},
    {"memory": {"hugepages": True, "balloon": "none"}},
    {"devices": {"max_queues": 1, "disk_cache": "unsafe", "disk_io": "io_uring"}},
    {"devices": {"max_queues": 256}},
    {"guest": {"hpet": "off", "kvmclock": "on", "hyperv": False}},
    {"cpu": {}, "memory": {}, "devices": {}, "guest": {}},
]
INVALID = [
    {"bogus": 1},
    {"description": 5},
    {"inherit": ["latency"]},
    {"host_tuning": "yes"},
    {"host_tuning": 1},
    {"cpu": "host"},
    {"cpu": {"mode": "host-model"}},
    {"cpu": {"mode": True}},
    {"cpu": {"priority": 0}},
    {"cpu": {"priority": 100}},
    {"cpu": {"priority": True}},
    {"cpu": {"priority": "1"}},
    {"cpu": {"priority": 1.5}},
    {"cpu": {"bogus": 1}},
    {"memory": {"pmu": "off"}},
    {"memory": {"balloon": "virtio"}},
    {"devices": {"max_queues": 0}},
    {"devices": {"max_queues": 257}},
    {"devices": {"disk_cache": ["none"]}},
    {"guest": {"hyperv": "on"}},
    {"guest": [1]},
    {"description": "x", "cpu": {"smt": "threads", "x": 1}},
]


@pytest.mark.parametrize("data", VALID, ids=json.dumps)
def test_mini_validator_accepts_what_jsonschema_accepts(data):
    """A profile that jsonschema accepts passes vmtune.schema.errors with no error."""
    assert VALIDATOR.is_valid(data)
    assert schema.errors(data, SCHEMA) == []


def jsonschema_paths(data) -> set[str]:
    return _paths(VALIDATOR, data)


def mini_paths(data) -> set[str]:
    return {path for path, _ in schema.errors(data, SCHEMA)}


@pytest.mark.parametrize("data", INVALID, ids=json.dumps)
def test_mini_validator_rejects_what_jsonschema_rejects_at_the_same_keys(data):
    """A profile that jsonschema rejects gets errors from vmtune.schema.errors at the same keys."""
    assert not VALIDATOR.is_valid(data)
    assert mini_paths(data) == jsonschema_paths(data) != set()


def test_mini_validator_rejects_a_toml_date_like_jsonschema():
    """A TOML date where a string belongs is rejected by both validators."""
    data = tomllib.loads("description = 2024-01-01\n")
    assert not VALIDATOR.is_valid(data)
    assert schema.errors(data, SCHEMA)


def test_integral_float_priority_is_refused_although_jsonschema_allows_it():
    """`priority = 1.0` is refused (jsonschema counts 1.0 as an integer; vmtune keeps floats out)."""
    data = {"cpu": {"priority": 1.0}}
    assert VALIDATOR.is_valid(data)  # the known, deliberate difference
    assert schema.errors(data, SCHEMA) == [("cpu.priority", "must be integer, not float")]


SCALARS = st.one_of(
    st.booleans(),
    st.sampled_from([-1, 0, 1, 99, 100, 256, 257]),
    st.integers(-5, 300),
    st.floats(allow_nan=False).filter(lambda f: not f.is_integer()),
    st.sampled_from(sorted({v for sec in SCHEMA["properties"].values() for p in sec.get("properties", {}).values()
                            for v in p.get("enum", [])}) + ["", "bogus", "latency"]),
    st.text(max_size=4),
)


def section(props: dict):
    """Mostly a table of known keys (plus an unknown one), sometimes a scalar where a table belongs."""
    table = st.dictionaries(st.sampled_from(sorted(props) + ["bogus"]), SCALARS, min_size=1, max_size=5)
    return st.integers(0, 4).flatmap(lambda i: SCALARS if i == 0 else table)


PROFILE_DATA = st.fixed_dictionaries({}, optional={
    key: section(sub["properties"]) if sub.get("type") == "object" else SCALARS
    for key, sub in {**SCHEMA["properties"], "bogus": {}}.items()
})


@settings(max_examples=500, deadline=None)
@given(PROFILE_DATA)
def test_mini_validator_agrees_with_jsonschema_on_generated_profiles(data):
    """On generated profile tables (integral floats aside) both validators fault the same keys."""
    assert mini_paths(data) == jsonschema_paths(data)
    assert (schema.errors(data, SCHEMA) == []) == VALIDATOR.is_valid(data)


# -- user profiles ------------------------------------------------------------------------------
def test_user_profile_may_inherit_a_builtin(user_dir):
    """A user profile with `inherit = "latency"` gets latency's values plus its own."""
    write(user_dir, "gaming", 'description = "games"\ninherit = "latency"\n[cpu]\nsmt = "isolate"\n')
    prof = profiles.load("gaming")
    assert prof.name == "gaming" and prof.description == "games"
    assert prof.cpu_smt == "isolate"
    assert prof.cpu_pinning == "dedicated" and prof.memory_hugepages is True


def test_user_profile_overrides_the_builtin_of_the_same_name(user_dir):
    """A user latency.toml replaces the built-in latency, also as realtime's parent."""
    write(user_dir, "latency", 'description = "mine"\n[cpu]\npinning = "node"\n')
    prof = profiles.load("latency")
    assert prof.description == "mine" and prof.cpu_pinning == "node"
    assert prof.memory_hugepages is False  # not merged with the built-in
    assert profiles.load("realtime").cpu_pinning == "node"


def test_user_profile_may_extend_the_builtin_it_overrides(user_dir):
    """A user latency.toml with `inherit = "latency"` extends the built-in instead of looping."""
    write(user_dir, "latency", 'inherit = "latency"\n[cpu]\nsmt = "isolate"\n')
    prof = profiles.load("latency")
    assert prof.cpu_smt == "isolate"
    assert prof.cpu_pinning == "dedicated" and prof.memory_hugepages is True
    assert profiles.load("realtime").cpu_smt == "isolate"


def test_explicit_user_dir_wins_over_the_environment(user_dir, tmp_path):
    """load(name, user_dir) reads that directory, not $VMTUNE_PROFILES."""
    write(user_dir, "mine", 'description = "from env"\n')
    other = tmp_path / "other"
    other.mkdir()
    write(other, "mine", 'description = "from arg"\n')
    assert profiles.load("mine").description == "from env"
    assert profiles.load("mine", str(other)).description == "from arg"


def test_names_lists_builtins_and_user_profiles_but_not_hidden_files(user_dir):
    """names() is the built-ins plus the user's *.toml, without hidden files."""
    write(user_dir, "gaming", "")
    write(user_dir, ".#gaming", "")
    (user_dir / "notes.txt").write_text("")
    assert profiles.names() == sorted([*BUILTIN, "gaming"])


def test_rewrite_uses_a_user_profile_from_the_environment(user_dir, capsys):
    """`vmtune rewrite --profile NAME` finds NAME in $VMTUNE_PROFILES and applies it."""
    write(user_dir, "pinned", 'inherit = "latency"\n[cpu]\nsmt = "isolate"\n')
    rc = cli.main(["rewrite", str(DB), "--host", str(HOST), "--profile", "pinned", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    data = json.loads(out)
    assert data["profile"] == "pinned"
    pins = [int(c) for c in data["placement"]["vcpupins"].values()]
    assert len({p % 16 for p in pins}) == 4  # isolate: one vCPU per physical core (siblings i, i+16)


# -- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,line,key", [
    ('description = "x"\nbogus = 1\n', 2, "bogus"),
    ('description = "x"\n[cpu]\nmode = "host"\nbogus = true\n', 4, "cpu.bogus"),
    ('inherit = "latency"\n[cpu]\npmu = "off"\n\n[memory]\npmu = "off"\n', 6, "memory.pmu"),
    ('description = "x"\ncpu.bogus = 1\n', 2, "cpu.bogus"),
    ('description = "x"\ncpu = { mode = "host", bogus = 1 }\n', 2, "cpu.bogus"),
    ('description = "x"\n[network]\nqueues = 4\n', 2, "network"),
], ids=["top-level", "in-table", "same-key-in-earlier-table", "dotted-key", "inline-table", "unknown-table"])
def test_unknown_key_error_names_file_and_line(user_dir, text, line, key):
    """An unknown key in a user profile is refused with `FILE:LINE: key` in the message."""
    path = write(user_dir, "mine", text)
    message = error_of("mine")
    assert message.startswith(f"{path}:{line}: {key} ")
    assert "not a known key" in message


@pytest.mark.parametrize("text,line,key", [
    ('[cpu]\nmode = "host"\n[guest]\nhpet = "maybe"\n', 4, "guest.hpet"),
    ('[devices]\nmax_queues = 0\n', 2, "devices.max_queues"),
    ('host_tuning = "yes"\n', 1, "host_tuning"),
    ('[cpu]\npriority = 1.0\n', 2, "cpu.priority"),
])
def test_bad_value_error_names_file_and_line(user_dir, text, line, key):
    """A schema-breaking value in a user profile is refused with `FILE:LINE: key` in the message."""
    path = write(user_dir, "mine", text)
    assert error_of("mine").startswith(f"{path}:{line}: {key} ")


def test_toml_syntax_error_names_file_and_line(user_dir):
    """A TOML syntax error in a user profile names the file and the line."""
    path = write(user_dir, "mine", 'description = "x"\n[cpu]\nmode = \n')
    message = error_of("mine")
    assert message.startswith(f"{path}: ") and "line 3" in message


def test_non_utf8_user_profile_is_an_invalid_input(user_dir):
    """A user profile that is not UTF-8 is refused with an error naming the file."""
    path = user_dir / "mine.toml"
    path.write_bytes(b'description = "\xff"\n')
    assert str(path) in error_of("mine")


def test_unreadable_user_profile_is_an_invalid_input(user_dir):
    """A user profile path that cannot be read (a directory) is refused, not skipped."""
    (user_dir / "latency.toml").mkdir()
    assert "cannot read profile" in error_of("latency")


@pytest.mark.parametrize("files,start,chain", [
    ({"a": 'inherit = "b"\n', "b": 'inherit = "a"\n'}, "a", "a -> b -> a"),
    ({"a": 'inherit = "a"\n'}, "a", "a -> a"),
    ({"a": 'inherit = "b"\n', "b": 'inherit = "c"\n', "c": 'inherit = "b"\n'}, "a", "a -> b -> c -> b"),
    ({"latency": 'inherit = "realtime"\n'}, "latency", "latency -> realtime -> latency"),
], ids=["two", "self", "tail", "through-a-builtin"])
def test_inheritance_cycles_are_refused(user_dir, files, start, chain):
    """A profile whose inherit chain comes back to a file already read is refused, naming the chain."""
    for name, text in files.items():
        write(user_dir, name, text)
    message = error_of(start)
    assert "inherits from itself" in message and f"({chain})" in message


@pytest.mark.parametrize("name", ["../latency", "a/b", "/etc/passwd", ".hidden", "..", "", "a\0b"])
def test_bad_profile_names_are_refused(name):
    """Profile names with a slash, a leading dot, a NUL or no characters are refused."""
    assert "bad profile name" in error_of(name)


@pytest.mark.parametrize("parent", ["../latency", "sub/x", "a\\u0000b"])
def test_bad_inherit_names_are_refused(user_dir, parent):
    """`inherit` naming a path (or holding a NUL) is refused like a bad --profile."""
    write(user_dir, "mine", f'inherit = "{parent}"\n')
    assert "bad profile name" in error_of("mine")


def test_unknown_profile_names_the_builtins():
    """An unknown profile is an invalid input listing the built-in names."""
    message = error_of("nosuch")
    assert "'nosuch'" in message and all(name in message for name in BUILTIN)


def test_inheriting_an_unknown_profile_is_refused(user_dir):
    """A user profile inheriting a profile that does not exist is refused, naming the missing one."""
    write(user_dir, "mine", 'inherit = "ghost"\n')
    assert "unknown profile 'ghost'" in error_of("mine")


def test_unknown_profile_names_the_folder_searched_and_what_it_holds(user_dir):
    """Issue 27: the folder searched (from $VMTUNE_PROFILES here) and the profiles found there."""
    write(user_dir, "fast", 'inherit = "latency"\n')
    write(user_dir, "quiet", 'inherit = "balanced"\n')
    message = error_of("nosuch", str(user_dir))
    assert f"not in {user_dir}" in message and "holds fast, quiet" in message, message
    assert all(name in message for name in BUILTIN) and message.count("\n") == 0
    assert "does not exist" in error_of("nosuch", str(user_dir / "missing"))
