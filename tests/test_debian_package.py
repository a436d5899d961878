"""vmtune as a Debian package (issue 27): ``scripts/package`` builds ``vmtune_VERSION_all.deb``, and on
this machine it installs (``apt-get install ./vmtune_VERSION_all.deb``), runs from /usr/bin on Debian's
python3, upgrades with its leases kept, and goes away on remove and purge with the host given back.

The build (the build dependencies installed with apt-get the first time, dpkg-buildpackage, lintian)
takes 10 s to a minute or more. ``scripts/test`` starts it in the background for the whole suite
(``python3 tests/test_debian_package.py --build DIR``, DIR in ``$VMTUNE_PACKAGE_RESULTS``) and the
test reads what it left in DIR; without that variable the test builds the package itself. After
the build, the same runner installs the package's Depends and Recommends from Debian, so that the
test's own install has only vmtune to unpack.

The rest changes this machine (a package installed and purged, the hook in
/etc/libvirt/hooks/qemu.d, the timer's enablement), so the module is one of conftest's
MACHINE_MODULES. The maintainer scripts' ``vmtune hook reap`` and ``vmtune hook restore`` read
/etc/libvirt/hooks/vmtune.env as the hook does: the test points both at a fake host there (the
sysfs tree of test_hook.py), takes a lease through the installed hook, and checks that an upgrade
keeps it and that the removal releases it and gives the fake host back (and, once more, that a
removal whose restore fails says so in one line and removes the package all the same). Nothing is
written to /run/vmtune. Debian's python3-lxml (and the Recommends: python3-libvirt, python3-prometheus-client)
stay installed after the purge.

Skipped, with the reason: not root, no apt-get, no network for the first install of the build
dependencies, or a vmtune package, a hook at /etc/libvirt/hooks/qemu.d/50-vmtune or a
/etc/libvirt/hooks/vmtune.env already on this machine (not touched).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

from fixtures.background import wait_done

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "package"
EXAMPLES = ROOT / "examples"
MIRROR = "http://deb.debian.org/debian/dists/bookworm/Release"  # this machine kind's apt source
WAIT_S = 900
HOOKS = Path("/etc/libvirt/hooks")
HOOK = HOOKS / "qemu.d" / "50-vmtune"
ENV_FILE = HOOKS / "vmtune.env"
HOOK_TARGET = Path("/usr/lib/vmtune/libvirt-hook")
UNITS = Path("/lib/systemd/system")
WANTS = Path("/etc/systemd/system/timers.target.wants/vmtune-reap.timer")
GONE = ("", "unknown ok not-installed", "deinstall ok not-installed")  # dpkg-query's Status: not there
RESTART_LINE = f"installed {HOOK}; restart libvirtd (or virtqemud) so that it sees a new hook"
# lintian warnings the package may have: none, but no-manual-page while the checkout has no man page
MAY_WARN = set() if (ROOT / "man" / "vmtune.8").exists() else {"no-manual-page"}


def _version() -> str:
    """vmtune.__version__, read as scripts/package reads it (this file also runs outside pytest)."""
    text = (ROOT / "vmtune" / "__init__.py").read_text()
    return re.search(r'^__version__ *= *["\']([^"\']+)["\']', text, re.M).group(1)


def _build_deps() -> list[str]:
    return re.search(r'^BUILD_DEPS="([^"]*)"', SCRIPT.read_text(), re.M).group(1).split()


def _installed(package: str) -> bool:
    got = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return got.stdout == "install ok installed"


def why_not() -> str | None:
    """Why the package cannot be built and installed here (the skip's reason); None when it can."""
    if os.geteuid() != 0:
        return "not root: the build dependencies, the install and the purge need root"
    if not shutil.which("apt-get") or not shutil.which("dpkg"):
        return "no apt-get or dpkg: not a Debian system"
    if any(not _installed(p) for p in _build_deps()):
        try:
            urllib.request.urlopen(MIRROR, timeout=10).close()  # noqa: S310 - a fixed http URL
        except OSError as exc:
            return f"no network to deb.debian.org for the build dependencies: {exc}"
    return None


def build(out: Path) -> None:
    """``scripts/package OUT``; ``done.json`` in ``out`` says how it went (``rc``, ``out``, ``err``,
    ``seconds``, ``prefetch``), or ``skip``: why it did not run. Written whatever happens, so that
    the test never waits for a runner that died."""
    out.mkdir(parents=True, exist_ok=True)
    done: dict = {"skip": None}
    try:
        done["skip"] = why_not()
        if done["skip"] is None:
            start = time.monotonic()
            proc = subprocess.run([str(SCRIPT), str(out)], capture_output=True, text=True, cwd=ROOT,
                                  stdin=subprocess.DEVNULL, check=False)
            done.update(rc=proc.returncode, out=proc.stdout, err=proc.stderr,
                        seconds=round(time.monotonic() - start, 1))
            # the .deb is there: the libvirt guest's boot (tests/test_cgroup2_guest.py) takes it from here
            (out / "built.json").write_text(json.dumps({"rc": proc.returncode}))
            if proc.returncode == 0:
                done["prefetch"] = prefetch(out / f"vmtune_{_version()}_all.deb")
    except Exception as exc:  # noqa: BLE001 - said in done.json, for the test to report
        done.update(rc=-1, out="", err=f"the build runner failed: {exc!r}")
    finally:
        (out / "done.json").write_text(json.dumps(done))


def prefetch(deb: Path) -> str:
    """Install what the package depends on and recommends from Debian now (python3-lxml,
    python3-libvirt, ...), so that the test's own install, in the serial "machine" worker, has only
    vmtune to unpack. apt-get's error, or "" (a failure here only makes that install slower)."""
    fields = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends", "Recommends"], capture_output=True, text=True)
    wanted = [item.split()[0] for line in fields.stdout.splitlines() for item in line.partition(":")[2].split(",")
              if item.strip() and "|" not in item]
    missing = [name for name in wanted if ":" not in name and not _installed(name)]  # python3:any is there
    if not missing:
        return ""
    proc = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "-o",
                           "DPkg::Lock::Timeout=300", *missing], capture_output=True, text=True,
                          env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, stdin=subprocess.DEVNULL,
                          check=False)
    if proc.returncode:
        return proc.stdout + proc.stderr
    # as apt-get install ./vmtune_*.deb would have them: installed for vmtune, autoremovable after it
    subprocess.run(["apt-mark", "auto", *missing], capture_output=True, check=False)
    return ""


def results(own: Path) -> tuple[Path, dict]:
    """The build's folder and what it left: waits for the background build of scripts/test, else
    builds into ``own``."""
    folder = os.environ.get("VMTUNE_PACKAGE_RESULTS")
    if folder:
        out = wait_done(folder, WAIT_S, "package build")
    else:
        out = own
        build(out)
    return out, json.loads((out / "done.json").read_text())


if "pytest" in sys.modules:
    import pytest

    import vmtune
    from fixtures.hook import A, CPU, ORIGINAL_GOVERNOR, build_sysfs, snapshot, value
    from vmtune.install import hookfile, reaper

    @pytest.fixture(scope="module")
    def built(tmp_path_factory):
        """The folder with the built .deb and its lintian output (the build skipped: the test too)."""
        out, done = results(tmp_path_factory.mktemp("package"))
        if done["skip"]:
            pytest.skip(done["skip"])
        assert done["rc"] == 0, f"scripts/package exited {done['rc']}:\n{done['out']}\n{done['err']}"
        deb = out / f"vmtune_{vmtune.__version__}_all.deb"
        assert deb.is_file(), sorted(p.name for p in out.iterdir())
        return out

    def _env(**extra: str) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VMTUNE_", "PYTHON"))}
        return {**env, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C.UTF-8", **extra}

    def _run(argv: list, *, ok: bool = True, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
        kw.setdefault("env", _env())
        kw.setdefault("stdin", subprocess.DEVNULL)
        proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kw)
        if ok:
            command = " ".join(map(str, argv))
            assert proc.returncode == 0, f"{command} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        return proc

    def _apt(*args: str) -> str:
        """apt-get's output (stdout and stderr: what the maintainer scripts printed)."""
        proc = _run(["apt-get", "-y", "-o", "DPkg::Lock::Timeout=120", *args])
        return proc.stdout + proc.stderr

    def _status() -> str:
        return subprocess.run(["dpkg-query", "-W", "-f=${Status}", "vmtune"], capture_output=True, text=True).stdout

    def _contents(deb: Path) -> list[str]:
        """The paths the package puts down, as dpkg -L lists them."""
        tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            names = {os.path.normpath("/" + m.name) for m in archive.getmembers()}
        return sorted(names - {"/"})

    def test_lintian_reports_no_error_and_no_unexplained_warning(built):
        """scripts/package ran lintian on the build: no error, and no warning but those explained
        (debian/vmtune.lintian-overrides holds the overridden ones, each with its reason)."""
        text = (built / f"vmtune_{vmtune.__version__}_all.lintian").read_text()
        assert not [line for line in text.splitlines() if line.startswith("E: ")], text
        warned = {line.split()[2] for line in text.splitlines() if line.startswith("W: ")}
        assert warned <= MAY_WARN, text

    @pytest.fixture
    def machine(built, tmp_path):
        """This machine without a vmtune package, hook or vmtune.env (else skip), a fake host for the
        hook and the maintainer scripts in vmtune.env; afterwards the package purged, vmtune.env
        gone and the folders dpkg removed back."""
        if _status() not in GONE:
            pytest.skip(f"a vmtune package is on this machine ({_status()}): not touched")
        for path in (HOOK, ENV_FILE):
            if os.path.lexists(path):
                pytest.skip(f"{path} exists: a vmtune installed here is not touched")
        dirs = [d for d in (HOOKS, HOOKS / "qemu.d", WANTS.parent) if d.is_dir()]
        hooks_made = not HOOKS.exists()
        sysfs = build_sysfs(tmp_path / "sys")
        (tmp_path / "profiles").mkdir()
        (tmp_path / "libvirt").mkdir()  # libvirt's run dir: no domain runs, every lease is young
        config = tmp_path / "vmtune.toml"
        config.write_text("")
        settings = {"VMTUNE_SYSFS": sysfs, "VMTUNE_STATE_DIR": tmp_path / "state", "VMTUNE_CONFIG": config,
                    "VMTUNE_PROFILES": tmp_path / "profiles", "VMTUNE_LIBVIRT_RUNDIR": tmp_path / "libvirt",
                    "VMTUNE_SYSLOG": "0"}
        try:
            HOOKS.mkdir(parents=True, exist_ok=True)
            ENV_FILE.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
            yield tmp_path
        finally:
            try:
                if _status() not in GONE:
                    _apt("purge", "vmtune")  # with vmtune.env still there: a lease left is the fake host's
            finally:
                ENV_FILE.unlink(missing_ok=True)
                for folder in dirs:
                    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
                if hooks_made and HOOKS.is_dir() and not any(HOOKS.iterdir()):
                    HOOKS.rmdir()  # made here for vmtune.env (no libvirt on this machine)

    def test_install_run_upgrade_remove_purge(built, machine):
        """The package's whole life on this machine, in order (each step needs the one before)."""
        deb = built / f"vmtune_{vmtune.__version__}_all.deb"
        paths = _contents(deb)
        there_before = {p for p in paths if os.path.lexists(p)}
        outside = machine / "elsewhere"
        (outside / "no-profiles").mkdir(parents=True)
        env = _env(VMTUNE_PROFILES=str(outside / "no-profiles"), VMTUNE_CONFIG=os.devnull)

        # install: the hook is new here, so one line says to restart libvirtd; nothing restarts it
        said = _apt("install", str(deb))
        assert _status() == "install ok installed", said
        assert RESTART_LINE in said.splitlines(), said
        listed = [p for p in _run(["dpkg", "-L", "vmtune"]).stdout.splitlines() if p != "/."]
        assert set(listed) == set(paths), set(listed) ^ set(paths)

        # the hook: a symlink to the script for Debian's python3 (vmtune.install.hookfile's text)
        assert HOOK.is_symlink() and Path(os.readlink(HOOK)) == HOOK_TARGET
        assert HOOK_TARGET.read_text() == hookfile.script("/usr/bin/python3")
        assert os.access(HOOK_TARGET, os.X_OK)
        # the reaper's units (vmtune.install.reaper.units, the first line aside), recognised as vmtune's; the timer enabled
        for name, text in reaper.units("/usr/bin/python3", None).items():
            assert reaper.ours(str(UNITS / name)), name
            assert (UNITS / name).read_text().partition("\n")[2] == text.partition("\n")[2], name
        assert "ExecStart=/usr/bin/python3 -m vmtune hook reap --quiet --hooks-dir /etc/libvirt/hooks" in \
            (UNITS / reaper.SERVICE).read_text()
        assert WANTS.is_symlink() and os.readlink(WANTS).endswith("/systemd/system/vmtune-reap.timer")

        # /usr/bin/vmtune on Debian's python3, from dist-packages, with its profiles and schemas
        assert _run(["/usr/bin/vmtune", "--version"], cwd=outside, env=env).stdout.strip() == \
            f"vmtune {vmtune.__version__}"
        assert Path("/usr/bin/vmtune").read_text().startswith("#!/usr/bin/python3\n")
        where = _run(["/usr/bin/python3", "-c", "import lxml, vmtune.hook, vmtune.schema; print(vmtune.__file__)"],
                     cwd=outside, env=env).stdout.strip()
        assert where == "/usr/lib/python3/dist-packages/vmtune/__init__.py"
        rows = json.loads(_run(["/usr/bin/vmtune", "profiles", "--json"], cwd=outside, env=env).stdout)
        assert {r["name"] for r in rows} == {"balanced", "latency", "realtime", "throughput"}
        assert not [r for r in rows if "error" in r]
        argv = ["rewrite", EXAMPLES / "stock-latency.xml", "--host", EXAMPLES / "hosts/2node-smt.xml"]
        packaged = _run(["/usr/bin/vmtune", *argv], cwd=outside, env=env)
        checkout = _run([sys.executable, "-m", "vmtune", *argv], cwd=outside, env=env)
        assert packaged.stdout == checkout.stdout and "<vmtune:undo" in packaged.stdout

        # the doctor finds the hook (through the symlink) and the reaper's timer, and finds them well
        report = json.loads(_run(["/usr/bin/vmtune", "doctor", "--no-measure", "--json"], ok=False, cwd=outside,
                                 env=env).stdout)
        found = {(f["area"], f["source"]): f for f in report["findings"]}
        hook = found[("hook", str(HOOK))]
        # a libvirtd that runs started before this install: the doctor says to restart it, as the postinst
        # did (the install is when dpkg made the link, not the archive's mtime it gives it)
        daemon = json.loads(_run(["/usr/bin/vmtune", "status", "--json", "-n", "0"], cwd=outside, env=env).stdout)["hook"]
        if daemon["daemon_since"] is not None:
            assert (hook["level"], hook["found"]) == ("INFO", f"{daemon['daemon']} started before the hook was installed: "
                                                              "restart it so that it sees the hook"), hook
        else:
            assert hook["level"] == "OK", hook
        reaped = [f for (area, source), f in found.items() if source.endswith("/systemd/system/vmtune-reap.timer")]
        assert [f["level"] for f in reaped] == ["OK"], reaped

        # man pages and completions, when the checkout has them
        for page in sorted((ROOT / "man").glob("*.[1-9]")):
            section = page.suffix[1:]
            installed = Path(f"/usr/share/man/man{section}/{page.name}.gz")
            assert installed in map(Path, listed), page.name
            if shutil.which("man"):
                assert _run(["man", "-w", section, page.stem]).stdout.strip() == str(installed)
        for mine, theirs in (("completion/vmtune.bash", "/usr/share/bash-completion/completions/vmtune"),
                             ("completion/_vmtune", "/usr/share/zsh/vendor-completions/_vmtune")):
            if (ROOT / mine).exists():
                assert Path(theirs).read_text() == (ROOT / mine).read_text(), theirs

        # the installed hook, run as libvirt runs it (through the symlink): an untagged domain costs
        # nothing; a latency one takes a lease on the fake host that vmtune.env names
        plain = _run([HOOK, "vm-x", "prepare", "begin", "-"], input="<domain><name>vm-x</name></domain>",
                     stdin=None)
        assert (plain.stdout, plain.stderr) == ("", "")
        sysfs, state = machine / "sys", machine / "state" / "state.json"
        before = snapshot(sysfs)
        tagged = _run([HOOK, "vm-a", "prepare", "begin", "-"], input=A, stdin=None)
        assert tagged.stdout == "", tagged.stdout
        assert [lease["name"] for lease in json.loads(state.read_text())["leases"].values()] == ["vm-a"]
        assert value(sysfs, f"{CPU}/cpu2/cpufreq/scaling_governor") == "performance"
        tuned, held = snapshot(sysfs), state.read_bytes()

        # an upgrade (the same version again: dpkg runs the upgrade's scripts) keeps the lease and the tuning
        said = _apt("install", "--reinstall", str(deb))
        assert RESTART_LINE not in said, said  # the hook was there
        assert state.read_bytes() == held and snapshot(sysfs) == tuned
        assert HOOK.is_symlink()

        # remove: the hook goes first, the lease is released and the fake host given back; no conffile stays
        said = _apt("remove", "vmtune")
        assert "released the lease of vm-a" in said, said
        assert "leases remain" not in said, said
        assert snapshot(sysfs) == before
        assert value(sysfs, f"{CPU}/cpu2/cpufreq/scaling_governor") == ORIGINAL_GOVERNOR
        assert not state.parent.exists(), list(state.parent.iterdir())  # it held nothing: gone with its files
        assert not os.path.lexists(HOOK) and not os.path.lexists("/usr/bin/vmtune")
        assert _run(["dpkg-query", "-W", "-f=${Conffiles}", "vmtune"]).stdout.strip() == ""

        # purge: nothing of the package's is left but the folders that were there before it
        _apt("purge", "vmtune")
        assert _status() in GONE, _status()
        left = {p for p in paths if os.path.lexists(p)} - there_before
        assert not left, left
        assert not os.path.lexists(WANTS)
        assert not list(Path("/var/lib/systemd/deb-systemd-helper-enabled").rglob("vmtune*"))

        # a removal whose restore fails (the state dir is unsafe: the restore refuses it) says so in one
        # line and removes the package all the same
        _apt("install", str(deb))
        _run([HOOK, "vm-a", "prepare", "begin", "-"], input=A, stdin=None)
        state.parent.chmod(0o777)
        said = _apt("purge", "vmtune")
        assert _status() in GONE, said
        assert [line for line in said.splitlines() if line.startswith("vmtune: leases remain")], said
        assert not os.path.lexists(HOOK) and not os.path.lexists("/usr/bin/vmtune")


def main() -> int:
    parser = argparse.ArgumentParser(description="Build vmtune's Debian package for this test (scripts/test "
                                                 "runs it in the background).")
    parser.add_argument("--build", metavar="DIR", required=True, type=Path,
                        help="build into DIR and leave done.json there")
    build(parser.parse_args().build)
    return 0


if __name__ == "__main__":
    sys.exit(main())
