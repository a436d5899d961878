"""vmtune as a package (setup.cfg, pyproject.toml): the wheel that ``python -m build`` makes works
when installed alone.

The wheel is built offline (``--no-isolation``, with the setuptools and wheel of the test venv) from
a copy of the sources, installed into a fresh venv (lxml from the configured index), and run from a
directory outside the checkout: it rewrites the example, lists the four profiles, and installs a
hook whose ``#!`` is that venv's interpreter. The version has one source, ``vmtune.__version__``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.wheel import build_wheel, run as _run

import vmtune

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PROFILES = {"balanced", "latency", "realtime", "throughput"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with only the built wheel (and lxml) in it; yields (venv, wheel, outside dir)."""
    if shutil.which("pip", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("the test venv has no pip")
    base = tmp_path_factory.mktemp("package")
    wheel = build_wheel(base)
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", venv], cwd=base)
    _run([venv / "bin/python", "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel], cwd=base)
    outside = base / "elsewhere"
    (outside / "no-profiles").mkdir(parents=True)
    return venv, wheel, outside


def _env(outside: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VMTUNE_", "PYTHON"))}
    env["VMTUNE_PROFILES"] = str(outside / "no-profiles")  # not the machine's /etc/vmtune/profiles
    env["VMTUNE_CONFIG"] = os.devnull  # an empty config: the defaults
    return env


def test_wheel_has_the_one_version(installed):
    """The wheel's name, its metadata and ``vmtune --version`` all say vmtune.__version__."""
    venv, wheel, outside = installed
    assert wheel.name.startswith(f"vmtune-{vmtune.__version__}-")
    probe = "import importlib.metadata as m, vmtune; print(m.version('vmtune'), vmtune.__version__, vmtune.__file__)"
    meta, version, where = _run([venv / "bin/python", "-c", probe], cwd=outside, env=_env(outside)).stdout.split()
    assert meta == version == vmtune.__version__
    assert Path(where).resolve().is_relative_to(venv.resolve()), where  # not the checkout's vmtune
    out = _run([venv / "bin/vmtune", "--version"], cwd=outside, env=_env(outside)).stdout
    assert out.strip() == f"vmtune {vmtune.__version__}"


def test_installed_wheel_rewrites_the_example(installed):
    """Outside the checkout, the installed vmtune tunes the example for the bundled host and for this one."""
    venv, _, outside = installed
    argv = [venv / "bin/vmtune", "rewrite", EXAMPLES / "db-4vcpu.xml", "--host", EXAMPLES / "hosts/2node-smt.xml",
            "--profile", "latency", "--json"]
    result = json.loads(_run(argv, cwd=outside, env=_env(outside)).stdout)
    assert result["profile"] == "latency" and result["changes"]
    assert "<vmtune:tune" in result["xml"] and "<vcpupin " in result["xml"]
    here = _run([venv / "bin/vmtune", "rewrite", EXAMPLES / "stock-latency.xml"], cwd=outside, env=_env(outside))
    assert "<domain" in here.stdout and here.stdout.rstrip().endswith("</domain>")
    assert '<vmtune:tune xmlns:vmtune="https://vmtune.dev/xmlns/1" profile="latency">' in here.stdout
    assert '<vmtune:undo version="1">' in here.stdout  # the record of what it changed


def test_installed_wheel_lists_the_four_profiles(installed):
    """The profiles travel in the wheel: ``vmtune profiles`` lists the four, each loaded without error."""
    venv, _, outside = installed
    rows = json.loads(_run([venv / "bin/vmtune", "profiles", "--json"], cwd=outside, env=_env(outside)).stdout)
    assert {r["name"] for r in rows} == PROFILES
    assert not [r for r in rows if "error" in r]


def test_installed_wheel_installs_a_hook_with_its_own_interpreter(installed):
    """``vmtune hook install`` writes a hook whose #! is the venv's python, and that hook runs."""
    venv, _, outside = installed
    hooks = outside / "hooks"
    _run([venv / "bin/vmtune", "hook", "install", "--hooks-dir", hooks, "--unit-dir", outside / "units"], cwd=outside,
         env=_env(outside))
    hook = hooks / "qemu.d" / "50-vmtune"
    first = hook.read_text().splitlines()[0]
    assert first == f"#!{venv / 'bin/python'}", first
    assert os.access(hook, os.X_OK)
    # an op vmtune ignores: the hook exits 0 at once, through that interpreter
    subprocess.run([hook, "some-domain", "stopped", "end", "-"], input="", text=True, check=True, timeout=30,
                   cwd=outside, env=_env(outside))
