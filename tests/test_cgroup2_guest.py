"""The hook on the common host, for real: ``scripts/cgroup2-guest`` boots Debian trixie (kernel 6.12)
under TCG, once with systemd 257 as PID 1 and once with a shell as PID 1 (cgroup v2 without a
service manager), and tests/guest_cgroup2/scenario.py checks the kernel's and systemd's own files
through a lease of a stand-in domain laid out as libvirt lays it out (see that file). A third boot
(``--libvirt``) is the host users run: libvirt 11.3 and QEMU 10 with vmtune from its .deb, driven
through virsh by tests/guest_cgroup2/libvirt_scenario.py.

Skipped, with the reason, where the guest cannot be built or booted here: not root, no QEMU, no
network to deb.debian.org, or mmdebstrap failing twice to fetch and install the packages (the first
build fetches them; later boots use the cached image).

The boots take a few minutes of one host thread each (single-threaded TCG), mostly while the rest of
the suite waits on other things: ``scripts/test`` starts them before pytest, in the background
(``python3 tests/test_cgroup2_guest.py --run DIR --boots default``, DIR in ``$VMTUNE_CGROUP2_RESULTS``),
and the test reads what they left in DIR. The whole suite's (``DEFAULT``) are the libvirt boot with
the scenario's first cases, which covers the systemd host with libvirt itself, and a boot past its
limit: one image, the libvirt one. ``VMTUNE_CGROUP2_BOOTS=all`` (``ALL``), or the module alone
(without that variable the test runs them itself), boots the stand-in hosts too and runs every case.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

from conftest import CORPUS
from fixtures.background import wait_done
from fixtures.wait import wait_until

import vmtune

ROOT = Path(__file__).resolve().parents[1]
GUEST = ROOT / "scripts" / "cgroup2-guest"
SCENARIO = ROOT / "tests" / "guest_cgroup2" / "scenario.py"
LIBVIRT_SCENARIO = ROOT / "tests" / "guest_cgroup2" / "libvirt_scenario.py"
MIRROR = "http://deb.debian.org/debian/dists/trixie/Release"
# with systemd, isolate = partition (today's isolation of the units and tasks, and the partition
# beside it); without, isolate = on (the plain cgroup v2 path). Each boot runs the other method
# too by hand: scenario.py with no --isolate.
LIBVIRT = [str(GUEST), "--libvirt", "-v", "--boot-timeout", "600", "--share", str(CORPUS), "--", "/usr/bin/python3",
           str(LIBVIRT_SCENARIO), "--corpus", str(CORPUS)]
RUNS = {
    "systemd": [str(GUEST), "--", "python3", str(SCENARIO), "--isolate", "partition"],
    "no-systemd": [str(GUEST), "--no-systemd", "--", "python3", str(SCENARIO), "--isolate", "on"],
    # on the libvirt image: the whole suite builds that one only
    "boot-limit": [str(GUEST), "--libvirt", "--boot-timeout", "2", "--", "true"],
    # libvirt 11 and QEMU 10 from trixie, vmtune from the .deb scripts/package builds from this checkout:
    # every case of the scenario (10 to 15 minutes of one host CPU)
    "libvirt": LIBVIRT,
    # the whole suite's: the package, a latency domain started beside an untagged one and destroyed,
    # QEMU killed under libvirt, and libvirt 11 judging the corpus' outputs (about 70 s after the boot)
    "libvirt-start": [*LIBVIRT, "--only", ",".join(QUICK := ("package", "start", "killed", "judge"))],
}
DEFAULT = ("libvirt-start", "boot-limit")  # scripts/test's background boots (VMTUNE_CGROUP2_BOOTS: others)
ALL = ("systemd", "no-systemd", "boot-limit", "libvirt")  # VMTUNE_CGROUP2_BOOTS=all, and the module alone
WAIT_S = 1200


def image_of(argv: list[str]) -> list[str]:
    """A run's image, as --build-only arguments: the libvirt one, else the plain one."""
    return ["--libvirt"] if "--libvirt" in argv else []


def argv_of(name: str, package: Path | None) -> list[str]:
    """Run ``name``'s command, the libvirt image's runs given ``package`` (``--deb``), else building their own."""
    argv = RUNS[name]
    if package is None or not image_of(argv):
        return list(argv)
    at = argv.index("--libvirt") + 1
    return [*argv[:at], "--deb", str(package), *argv[at:]]


def deb(out: Path) -> Path | None:
    """vmtune's .deb for the libvirt runs, built once for all of them: the background package build's
    (scripts/test, ``$VMTUNE_PACKAGE_RESULTS``), else built into ``out`` here. None when it did not
    build (each run then builds its own, and says why it cannot)."""
    folder = os.environ.get("VMTUNE_PACKAGE_RESULTS")
    if folder:  # tests/test_debian_package.py --build leaves built.json once scripts/package is done
        wait_until(lambda: any((Path(folder) / n).exists() for n in ("built.json", "done.json")), WAIT_S,
                   f"the background package build left nothing in {folder}", interval=0.5)
        where = Path(folder)
    else:
        where = out / "package"
        subprocess.run([str(ROOT / "scripts" / "package"), str(where)], capture_output=True, check=False,
                       stdin=subprocess.DEVNULL)
    built = where / f"vmtune_{vmtune.__version__}_all.deb"  # the name scripts/package gives this checkout's
    return built if built.exists() else None


def why_not() -> str | None:
    """Why the guest cannot run here (the skip's reason); None when it can."""
    if os.geteuid() != 0:
        return "not root: the guest's image build and virtiofsd need root"
    if not shutil.which("qemu-system-x86_64"):
        return "no qemu-system-x86_64"
    cache = Path(os.environ.get("VMTUNE_CGROUP2_CACHE", "/var/cache/vmtune/cgroup2-guest"))
    if cache.is_dir() and any(cache.glob("*/root.img")):
        return None  # an image is cached (of this recipe or not: the build says)
    try:
        urllib.request.urlopen(MIRROR, timeout=10).close()  # noqa: S310 - a fixed http URL
    except OSError as exc:
        return f"no network to deb.debian.org for the first build of the guest: {exc}"
    return None


def run_all(out: Path, names: tuple[str, ...] = ALL) -> None:
    """Build the image, then the runs ``names`` of ``RUNS`` at once; each leaves NAME.json in ``out``
    (``rc``, ``out``, ``err``), and ``done.json`` says it is all there (or ``skip``: why)."""
    out.mkdir(parents=True, exist_ok=True)
    why = why_not()
    if why is None:
        for extra in sorted({tuple(image_of(RUNS[name])) for name in names}):
            for _ in range(2):  # a second try for a mirror that failed once
                build = subprocess.run([str(GUEST), "--build-only", *extra], capture_output=True, text=True,
                                       check=False)
                if build.returncode == 0:
                    break
            if build.returncode:
                break
        if build.returncode and "mmdebstrap could not build the guest from" in build.stderr:
            why = "the guest's image cannot be built here: " + build.stderr.strip().splitlines()[-1]
        elif build.returncode:
            (out / "build.json").write_text(json.dumps({"rc": build.returncode, "err": build.stderr}))
        else:
            package = deb(out) if any(image_of(RUNS[name]) for name in names) else None
            procs = {name: subprocess.Popen(argv_of(name, package), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            text=True)
                     for name in RUNS if name in names}
            for name, proc in procs.items():
                stdout, stderr = proc.communicate(timeout=WAIT_S)
                (out / f"{name}.json").write_text(json.dumps({"rc": proc.returncode, "out": stdout, "err": stderr}))
    (out / "done.json").write_text(json.dumps({"skip": why}))


def results() -> dict:
    """What the runs left: waits for the background runner of scripts/test, else runs them here."""
    folder = os.environ.get("VMTUNE_CGROUP2_RESULTS")
    if folder:
        out = wait_done(folder, WAIT_S, "guest runs")
        return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    import tempfile

    with tempfile.TemporaryDirectory(prefix="cgroup2-guest-") as tmp:  # run here: nothing left behind
        run_all(Path(tmp))
        return {p.stem: json.loads(p.read_text()) for p in Path(tmp).glob("*.json")}


if "pytest" in sys.modules:
    import pytest

    @pytest.fixture(scope="module")
    def runs():
        got = results()
        if got["done"]["skip"]:
            pytest.skip(got["done"]["skip"])
        assert "build" not in got, got["build"]["err"]
        return got

    def test_the_hooks_isolation_on_systemd_and_on_plain_cgroup_v2(runs):
        """Both boots pass every check of the scenario (tests/guest_cgroup2/scenario.py). Not among the
        whole suite's boots: the libvirt boot covers the systemd host (VMTUNE_CGROUP2_BOOTS=all)."""
        if "systemd" not in runs and "no-systemd" not in runs:
            pytest.skip("the stand-in boots are not among this run's background boots (VMTUNE_CGROUP2_BOOTS=all)")
        for name in ("systemd", "no-systemd"):
            if name not in runs:
                continue
            run = runs[name]
            assert run["rc"] == 0 and "\n0 failed\n" in run["out"], f"{name}:\n{run['out']}\n{run['err']}"
            assert "FAIL:" not in run["out"]
        if "systemd" in runs:
            assert "AllowedCPUs of init.scope leaves out CPU 2" in runs["systemd"]["out"]
            assert "the vCPU group is an isolated partition" in runs["systemd"]["out"]
        if "no-systemd" in runs:
            assert "cpuset.cpus of vmtune-plain leaves out CPU 2" in runs["no-systemd"]["out"]

    def test_vmtune_from_its_package_driven_by_libvirt(runs):
        """libvirt 11 and QEMU 10 in the trixie guest, vmtune installed from its .deb: every check of
        tests/guest_cgroup2/libvirt_scenario.py holds. The whole suite runs its first cases (the package,
        start, an untagged domain, destroy, QEMU killed, libvirt 11 judging the corpus' outputs); the
        libvirt run (VMTUNE_CGROUP2_BOOTS=all, or this module alone) all of them: daemon-reload and
        libvirtd restarted, managedsave, save and restore, isolate = "partition", three domains at once,
        an incoming migration, a disk's queues over iothreads, apt-get purge with a lease held."""
        name = next((n for n in ("libvirt", "libvirt-start") if n in runs), None)
        if name is None:
            pytest.skip("no libvirt boot among this run's background boots")
        run = runs[name]
        assert run["rc"] == 0 and "\n0 failed\n" in run["out"], f"{name}:\n{run['out']}\n{run['err']}"
        for case in (("package", "start", "killed", "restart", "managedsave", "saverestore", "partition", "three",
                      "migrate", "iothreads", "judge", "purge") if name == "libvirt" else QUICK):
            assert f"case {case}:" in run["out"], case
        assert "ok: start: " in run["out"] and "ok: untagged: " in run["out"] and "ok: destroy" in run["out"]

    def test_the_libvirt_runs_share_one_deb_from_the_background_build(tmp_path, monkeypatch):
        """The whole suite's libvirt boots install the .deb the background package build made (once
        its built.json is there), and build the libvirt image only; without one they build their own."""
        folder = tmp_path / "package"
        folder.mkdir()
        (folder / "vmtune_9.9_all.deb").write_bytes(b"!<arch>\n")  # an older build left beside: not this one
        (folder / f"vmtune_{vmtune.__version__}_all.deb").write_bytes(b"!<arch>\n")
        (folder / "built.json").write_text('{"rc": 0}')
        monkeypatch.setenv("VMTUNE_PACKAGE_RESULTS", str(folder))
        package = deb(tmp_path / "out")
        assert package == folder / f"vmtune_{vmtune.__version__}_all.deb"
        for name in DEFAULT:
            argv = argv_of(name, package)
            assert argv[argv.index("--libvirt") + 1:][:2] == ["--deb", str(package)], argv
            assert argv.index("--") > argv.index("--deb"), argv
        assert {tuple(image_of(RUNS[name])) for name in DEFAULT} == {("--libvirt",)}
        assert argv_of("systemd", package) == RUNS["systemd"] and argv_of("libvirt", None) == RUNS["libvirt"]
        assert RUNS["libvirt-start"][-2:] == ["--only", ",".join(QUICK)]

    def test_the_runner_and_the_scenario_refuse_names_they_do_not_have(tmp_path):
        runner = subprocess.run([sys.executable, __file__, "--run", str(tmp_path), "--boots", "libvirt,nope"],
                                capture_output=True, text=True)
        assert runner.returncode == 2 and "no run nope" in runner.stderr, runner.stderr
        assert not any(tmp_path.iterdir())
        for only, says in (("package,nope", "no case nope"), ("start,killed", "package goes first")):
            proc = subprocess.run([sys.executable, str(LIBVIRT_SCENARIO), "--only", only], capture_output=True, text=True)
            assert proc.returncode == 2 and says in proc.stderr, proc.stderr
        if not Path("/run/cgroup2-guest").exists():  # and it runs in the guest only
            proc = subprocess.run([sys.executable, str(LIBVIRT_SCENARIO), "--only", "package"], capture_output=True,
                                  text=True)
            assert proc.returncode == 2 and "runs inside scripts/cgroup2-guest" in proc.stderr, proc.stderr

    def test_a_boot_that_does_not_come_up_is_one_line_within_its_limit(runs):
        run = runs["boot-limit"]
        lines = run["err"].strip().splitlines()
        assert run["rc"] == 125, run
        assert len(lines) == 1 and lines[0].startswith(
            "cgroup2-guest: error: the guest did not start its system within 2 s; last console line:"), run["err"]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="run the guest's boots into DIR (scripts/test does, in the background)")
    parser.add_argument("--run", metavar="DIR", required=True)
    parser.add_argument("--boots", metavar="NAMES", default="all",
                        help=f"which runs, comma-separated, of {', '.join(RUNS)}; all: {','.join(ALL)}; "
                             f"default: {','.join(DEFAULT)} (scripts/test's)")
    args = parser.parse_args()
    names = {"all": ALL, "default": DEFAULT}.get(args.boots) or tuple(args.boots.split(","))
    unknown = [name for name in names if name not in RUNS]
    if unknown:
        parser.error(f"no run {', '.join(unknown)} (the runs: {', '.join(RUNS)})")
    run_all(Path(args.run), names)
