"""scripts/vmtune and scripts/bootstrap --libvirt (issue 27: the live commands after the README's
first command), in a throwaway checkout, without pip, apt-get or the network: a fake bootstrap, or
the real one with a fake pip in a venv made without pip. The real route, with apt-get and pip, is
tests/test_live.py's test_the_checkout_route_gives_the_live_commands. And scripts/test's reading of
its arguments: the whole suite (the background boots start) or a part.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DIST = Path("/usr/lib/python3/dist-packages")
BUILD_DEBS = ("libvirt-dev", "pkg-config", "gcc", "python3-dev")


def _script(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def _installed(package: str) -> bool:
    found = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return found.stdout == "install ok installed"


# -- scripts/vmtune: which commands ask for libvirt's binding ------------------------------------------
@pytest.fixture
def fake_checkout(tmp_path):
    """A checkout whose bootstrap and vmtune only log their arguments (exit: $BOOTSTRAP_RC)."""
    co = tmp_path / "co"
    (co / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "vmtune", co / "scripts" / "vmtune")
    log = tmp_path / "log"
    _script(co / "scripts" / "bootstrap", f'#!/bin/sh\necho "bootstrap $*" >>{log}\nexit "${{BOOTSTRAP_RC:-0}}"\n')
    _script(co / ".venv" / "bin" / "vmtune", f'#!/bin/sh\necho "vmtune $*" >>{log}\n')

    def run(*argv: str, rc: int = 0) -> tuple[int, list[str]]:
        log.unlink(missing_ok=True)
        done = subprocess.run([co / "scripts" / "vmtune", *argv], env={**os.environ, "BOOTSTRAP_RC": str(rc)},
                              capture_output=True, text=True)
        return done.returncode, [line.rstrip() for line in log.read_text().splitlines()] if log.exists() else []

    return run


@pytest.mark.parametrize("argv, live", [
    (["rewrite", "examples/stock-latency.xml", "--diff"], False),  # the README's first command
    (["rewrite", "plan", "--diff"], False), (["profiles"], False), (["topology"], False),
    (["hook", "install"], False), (["untune", "x.xml"], False),
    (["plan"], True), (["plan", "--json", "-c", "test:///default"], True), (["tag", "x", "--profile", "latency"], True),
    (["untag", "x"], True), (["apply", "--all", "--dry-run"], True), (["revert", "x"], True),
    (["map"], True), (["map", "--connect", "test:///default"], True),
    (["map", "--host", "caps.xml"], False), (["map", "--claim=d.xml"], False), (["map", "--ho", "caps.xml"], False),
    (["doctor"], False), (["doctor", "--sysfs", "/cap/sys"], False),
    (["doctor", "--connect", "qemu:///system"], True), (["doctor", "--conn=test:///default"], True),
    (["plan", "--help"], False), (["--version"], False), ([], False),
], ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_vmtune_gives_libvirt_to_the_live_commands_only(fake_checkout, argv, live):
    rc, log = fake_checkout(*argv)
    assert rc == 0
    assert log == [f"bootstrap{' --libvirt' if live else ''}", f"vmtune {' '.join(argv)}".rstrip()]


def test_a_venv_without_the_binding_still_runs_vmtune(fake_checkout):
    """bootstrap --libvirt exit 3 (no binding; it said why): vmtune runs and says how to get it (exit
    4); any other failure of bootstrap stops there."""
    rc, log = fake_checkout("plan", rc=3)
    assert rc == 0 and log == ["bootstrap --libvirt", "vmtune plan"]
    rc, log = fake_checkout("plan", rc=1)
    assert rc == 1 and log == ["bootstrap --libvirt"]
    rc, log = fake_checkout("rewrite", "x.xml", rc=1)
    assert rc == 1 and log == ["bootstrap"]


# -- scripts/bootstrap --libvirt -----------------------------------------------------------------------
def _checkout(tmp_path: Path, python: str) -> tuple[Path, Path]:
    """A checkout with the real bootstrap and a venv of ``python`` made without pip; its pip is a
    fake that logs its arguments, and vmtune counts as installed (the stamp). Returns (checkout, log)."""
    co = tmp_path / "co"
    (co / "scripts").mkdir(parents=True)
    for name in ("bootstrap", "apt-lib"):
        shutil.copy2(ROOT / "scripts" / name, co / "scripts" / name)
    (co / "setup.cfg").write_text("")
    made = subprocess.run([python, "-m", "venv", "--without-pip", co / ".venv"], capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"{python} -m venv: {made.stderr.strip()}")
    log = tmp_path / "pip.log"
    _script(co / ".venv" / "bin" / "pip", f'#!/bin/sh\necho "$*" >>{log}\n')
    stamp = co / ".venv" / ".vmtune-installed"
    stamp.touch()
    os.utime(co / "setup.cfg", (1, 1))  # older than the stamp: nothing to install
    return co, log


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith(("PYENV", "VIRTUAL_ENV"))},
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def test_bootstrap_links_debians_binding_alone(tmp_path):
    """A venv of Debian's python3: python3-libvirt's modules are linked in (no .pth, nothing else of
    Debian's dist-packages), pip is not asked for anything, and a second run has nothing to do."""
    if not os.access("/usr/bin/python3", os.X_OK) or not _installed("python3-libvirt"):
        pytest.skip("needs Debian's python3 and python3-libvirt (tests/test_live.py installs it as root)")
    co, log = _checkout(tmp_path, "/usr/bin/python3")
    site = next((co / ".venv" / "lib").glob("python3*/site-packages"))
    before = set(os.listdir(site))
    done = subprocess.run([co / "scripts" / "bootstrap", "--libvirt"], capture_output=True, text=True, env=_env())
    assert done.returncode == 0 and done.stderr == "", done.stderr
    added = set(os.listdir(site)) - before - {"__pycache__"}  # Python's own cache of what `import libvirt` read
    assert added and all(n.startswith(("libvirt", "libvirtmod", "libvirt_python")) for n in added), added
    assert all((site / n).is_symlink() and os.readlink(site / n).startswith(str(DIST)) for n in added)
    assert not [n for n in added if n.endswith(".pth")]
    python = co / ".venv" / "bin" / "python"
    where = subprocess.run([python, "-c", "import libvirt; print(libvirt.__file__)"], capture_output=True, text=True)
    assert where.returncode == 0 and where.stdout.strip() == str(site / "libvirt.py"), where.stderr
    if list(DIST.glob("apt_pkg*.so")):
        assert subprocess.run([python, "-c", "import apt_pkg"], capture_output=True).returncode != 0
    assert not log.exists()
    again = subprocess.run([co / "scripts" / "bootstrap", "--libvirt"], capture_output=True, text=True, env=_env())
    assert again.returncode == 0 and again.stderr == ""


def _other_python() -> Path | None:
    """A python3 that is not Debian's /usr/bin/python3: the tests' own (a venv of another python), else
    python3 on PATH (pyenv's, say; bootstrap makes the venv of Debian's where there is one)."""
    if sys.base_prefix != "/usr":
        return Path(sys.base_prefix) / "bin" / "python3"
    found = shutil.which("python3", path=os.environ.get("PATH", "").replace(str(Path(sys.executable).parent), ""))
    if found is None:
        return None
    prefix = subprocess.run([found, "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True)
    other = Path(prefix.stdout.strip()) / "bin" / "python3"
    return other if prefix.returncode == 0 and prefix.stdout.strip() != "/usr" and os.access(other, os.X_OK) else None


def test_bootstrap_builds_libvirt_python_for_another_python(tmp_path):
    """A venv of another python (pyenv's, say): Debian's binding is not linked (it is built for
    Debian's python); libvirt-python is built with pip when the headers and gcc are there; when the
    venv still has no binding: exit 3, one line saying what to install."""
    other = _other_python()
    if other is None:
        pytest.skip("no python3 but Debian's to make a venv of")
    if os.geteuid() == 0 and not all(_installed(p) for p in BUILD_DEBS):
        pytest.skip("as root, bootstrap would apt-get install the build dependencies")
    co, log = _checkout(tmp_path, str(other))
    done = subprocess.run([co / "scripts" / "bootstrap", "--libvirt"], capture_output=True, text=True, env=_env())
    assert done.returncode == 3
    assert done.stderr.splitlines()[-1].startswith(f"bootstrap: {co}/.venv has no libvirt binding (libvirt-python)")
    site = next((co / ".venv" / "lib").glob("python3*/site-packages"))
    assert not list(site.glob("libvirt*"))  # nothing of Debian's linked into another python's venv
    buildable = shutil.which("gcc") and subprocess.run(["pkg-config", "--exists", "libvirt"]).returncode == 0
    asked = log.read_text().splitlines() if log.exists() else []
    assert asked == (["install -q --disable-pip-version-check libvirt-python"] if buildable else [])


# -- scripts/test: the whole suite or a part ---------------------------------------------------------
@pytest.mark.parametrize("argv, scope", [
    ([], "whole"), (["-q"], "whole"), (["-p", "no:cacheprovider", "-q"], "whole"), (["-n", "3"], "whole"),
    (["-o", "addopts=", "-x"], "whole"), (["-W", "error", "--tb", "short"], "whole"),
    (["-pno:cacheprovider"], "whole"),
    (["tests/test_cli.py"], "part"), (["-q", "tests/test_cli.py::test_x"], "part"), (["-k", "hook"], "part"),
    (["-khook"], "part"), (["-m", "slow"], "part"), (["--deselect", "tests/test_cli.py"], "part"),
    (["--lf"], "part"), (["-p", "no:cacheprovider", "-k", "hook", "-q"], "part"),
])
def test_scripts_test_tells_the_whole_suite_from_a_part(argv, scope):
    """An option's value (``-p no:cacheprovider``) is not a path: the run stays whole and starts the
    background boots; a path, a node id, ``-k``, ``-m``, ``--deselect`` or ``--lf`` select a part."""
    proc = subprocess.run([str(ROOT / "scripts" / "test"), *argv], env={**os.environ, "VMTUNE_TEST_SCOPE": "1"},
                          capture_output=True, text=True, timeout=30)
    assert (proc.returncode, proc.stdout.strip()) == (0, scope), proc.stderr
