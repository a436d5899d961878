"""vmtune from its .deb, driven by libvirt itself, inside ``scripts/cgroup2-guest --libvirt``.

Run as root in the guest (systemd as PID 1 on cgroup v2, 4 CPUs, Debian's libvirtd and QEMU, vmtune
installed with ``apt-get install ./vmtune_*.deb``) by its /usr/bin/python3; ``tests/test_cgroup2_guest.py``
runs it. Everything goes through what a user has: ``virsh`` (define, start, destroy, managedsave,
restart of the daemon), ``vmtune tag``, ``vmtune apply``, ``vmtune status --json`` and ``apt-get purge``.
The domains have no disk and sit in SeaBIOS under TCG: enough for libvirt to lay out their cgroups
and threads and to call the hook. It checks, against the kernel's and systemd's own files
(``scenario.snapshot``):

- **package**: ``vmtune`` on PATH, ``import vmtune`` and the hook are the package's;
- **start**: the lease is taken, each vCPU thread runs where the XML pins it, the held CPUs are an
  isolated cpuset partition (``isolate = "auto"``, as the package leaves it: under TCG at the
  domain's ``libvirt/`` group), and the host's units and a host task started now stay off them;
- **untagged**: a domain vmtune does not manage starts while the lease is held;
- **destroy**: the host exactly as before the start (units' ``AllowedCPUs``, drop-ins, cpusets, IRQ
  and workqueue masks, sysctls, every thread's affinity);
- **killed**: QEMU killed with SIGKILL under libvirt: the lease goes and the host is as before;
- **restart**: ``systemctl daemon-reload`` keeps the partition, and ``systemctl restart libvirtd``
  while the domain runs keeps the lease; the release still gives the host back;
- **managedsave**: the lease goes with the save and comes back with the start, on the same pins;
- **saverestore**: ``virsh save`` then ``virsh restore``: the lease goes and comes back (the hook's
  ``restore`` filter), on the same CPUs;
- **partition**: ``[hook] isolate = "partition"`` in the config makes the same partition, given
  back the same;
- **three**: two latency domains and a throughput domain at once: no CPU held twice, and the
  throughput domain's vCPUs off the held CPUs; all released;
- **migrate**: an incoming migration as the hook sees it: the ``migrate`` filter re-pins a domain
  that comes pinned on CPUs another lease holds here, and libvirt starts it on the new pins;
- **iothreads**: ``vmtune apply`` maps a virtio disk's queues over several iothreads (libvirt 11,
  QEMU 10, the versions from the connection), and QEMU runs them (``virsh iothreadinfo``);
- **judge**: this libvirt judges every output of the corpus for each profile (its ``domain.rng``,
  the test driver and ``qemu:///system``: tests/guest_cgroup2/libvirt_judge.py, given ``--corpus``);
- **purge**: ``apt-get purge vmtune`` with a lease held releases it, leaves nothing of vmtune's,
  and domains still start.

Each check prints ``ok: ...`` or ``FAIL: ...``; the exit status is the number of failed checks.
``--case NAME`` runs the cases up to NAME's and NAME (they build on each other; purge goes last);
``--only A,B`` runs those cases, in this order (package first: it defines the domains the others
start). The whole suite runs ``--only package,start,killed,judge`` (tests/test_cgroup2_guest.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import scenario as base  # tests/guest_cgroup2/scenario.py: the host's own files, before and after
from scenario import check, cpus, read, sh

URI = "qemu:///system"
HOOK = Path("/etc/libvirt/hooks/qemu.d/50-vmtune")
RUNDIR = Path("/run/libvirt/qemu")
STATE = Path("/run/vmtune")
ISOLATED = base.CG / "cpuset.cpus.isolated"
GUEST = Path("/run/cgroup2-guest")  # scripts/cgroup2-guest's control folder, in its guest only


def skip() -> tuple[Path, ...]:
    """The domains' own groups (they come and go); machine.slice's own files are compared."""
    return tuple(base.CG.glob("machine.slice/machine-qemu*"))
DOMAIN = """<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>{mib}</memory>
  <vcpu>{vcpus}</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>
  <features><acpi/></features>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <controller type='usb' model='none'/>
    <memballoon model='none'/>
  </devices>
</domain>
"""


def given_back(before: dict, what: str) -> None:
    """The host as ``before`` (``scenario.compare``), but for the IRQ threads' affinity (``irq/N-…``):
    the kernel sets it from its IRQ's effective affinity, whose mask the ``kernel`` part compares
    exactly, and a partition's change resets it; it follows the IRQ again when the IRQ next fires."""
    after = base.snapshot(skip())

    def kernel_owned(tid: str) -> bool:
        return (read(Path(f"/proc/{tid}/comm")) or "").startswith("irq/")

    trimmed = [{**snap, "tasks": {k: v for k, v in snap["tasks"].items() if not kernel_owned(k[0])}}
               for snap in (before, after)]
    base.compare(trimmed[0], trimmed[1], what)


def virsh(*args: str, check_rc: bool = True) -> str:
    return sh("virsh", "-q", "-c", URI, *args, check_rc=check_rc)


def vmtune(*args: str) -> str:
    return sh("vmtune", *args)


def until(pred, timeout: float, what: str) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.2)
    check(False, f"{what} within {timeout:.0f} s")
    return False


def define(name: str, profile: str | None, vcpus: int = 1, mib: int = 48) -> None:
    path = Path(f"/tmp/{name}.xml")
    path.write_text(DOMAIN.format(name=name, vcpus=vcpus, mib=mib))
    virsh("define", str(path))
    if profile:
        vmtune("tag", name, "--profile", profile)


def leases() -> dict[str, dict]:
    """The leases held, by domain name, from the hook's state file (``vmtune status`` reads the same,
    in a process of its own: seconds under TCG, so once per case, in ``held_checks``)."""
    try:
        doc = json.loads((STATE / "state.json").read_text())
    except FileNotFoundError:
        return {}
    return {lease["name"]: lease for lease in doc.get("leases", {}).values()}


def status() -> dict[str, dict]:
    """The leases as ``vmtune status --json`` shows them."""
    return {lease["name"]: lease for lease in json.loads(vmtune("status", "--json", "-n", "0"))["leases"]}


def state(name: str) -> str:
    return virsh("domstate", name, check_rc=False)


def qemu_pid(name: str) -> int:
    return int(read(RUNDIR / f"{name}.pid") or 0)


def pins(name: str) -> dict[int, set[int]]:
    """vCPU -> the CPUs the persistent XML pins it to."""
    from lxml import etree

    root = etree.fromstring(virsh("dumpxml", "--inactive", name).encode())
    return {int(p.get("vcpu")): cpus(p.get("cpuset")) for p in root.iterfind("cputune/vcpupin")}


def vcpu_threads(pid: int) -> dict[int, set[int]]:
    """vCPU -> the CPUs its QEMU thread (``CPU N/TCG``) may run on, now."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        comm = read(task / "comm") or ""
        if comm.startswith("CPU ") and "/" in comm:
            status = read(task / "status") or ""
            allowed = next(line.split(":", 1)[1] for line in status.splitlines() if line.startswith("Cpus_allowed_list"))
            out[int(comm[4:].split("/")[0])] = cpus(allowed.strip())
    return out


def start(name: str) -> None:
    virsh("start", name)
    until(lambda: state(name) == "running" and qemu_pid(name) > 0, 60, f"{name} runs")


def destroy(name: str) -> None:
    virsh("destroy", name, check_rc=False)
    until(lambda: state(name) == "shut off", 60, f"{name} stops")


def partition_group(name: str) -> Path | None:
    """The domain's ``libvirt/`` group (its QEMU's own group is ``libvirt/emulator``)."""
    text = read(Path(f"/proc/{qemu_pid(name)}/cgroup")) or ""
    own = next((line[3:] for line in text.splitlines() if line.startswith("0::")), "")
    group = base.CG / own.strip("/")
    return group.parent if group.name == "emulator" else None


def held_checks(name: str, what: str) -> set[int]:
    """The lease of a running ``name`` and what it must mean; the CPUs it holds."""
    lease = status().get(name)
    check(lease is not None, f"{what}: {name} holds a lease (vmtune status)")
    if lease is None:
        return set()
    held = cpus(lease["cpus"])
    want = pins(name)
    got = vcpu_threads(qemu_pid(name))
    check(got == want and bool(got), f"{what}: {name}'s vCPU threads run where its XML pins them ({got} == {want})")
    check(set().union(*want.values()) <= held, f"{what}: the lease holds {name}'s vCPU CPUs ({lease['cpus']})")
    for unit in base.UNITS:
        allowed = cpus(base.allowed(unit))
        check(bool(allowed) and not allowed & held, f"{what}: {unit} AllowedCPUs={base.allowed(unit)} is off {held}")
    # isolate = "auto" as the package leaves it: this kernel makes partitions, and under TCG the domain's
    # libvirt/ group (its emulator beside its vCPUs) is the one partition (kinds/partition.py)
    group = partition_group(name)
    check(lease["partition"] == lease["cpus"] and group is not None
          and read(group / "cpuset.cpus.partition") == "isolated" and held <= cpus(read(ISOLATED) or ""),
          f"{what}: {name}'s CPUs are an isolated partition at its libvirt/ group (lease {lease['partition']!r}, "
          f"{group and read(group / 'cpuset.cpus.partition')!r}, cpuset.cpus.isolated {read(ISOLATED)!r})")
    child = subprocess.Popen(["sleep", "5"])
    proc_status = read(Path(f"/proc/{child.pid}/status")) or ""
    child.kill()
    child.wait()
    now = next(line.split(":", 1)[1].strip() for line in proc_status.splitlines()
               if line.startswith("Cpus_allowed_list"))
    check(not cpus(now) & held, f"{what}: a host task started now runs off the held CPUs ({now})")
    return held


def case_package() -> None:
    check(shutil.which("vmtune") == "/usr/bin/vmtune", f"package: vmtune on PATH is /usr/bin/vmtune ({shutil.which('vmtune')})")
    where = subprocess.run(["/usr/bin/python3", "-c", "import vmtune; print(vmtune.__file__)"], cwd="/",
                           capture_output=True, text=True, check=False).stdout.strip()  # not the checkout's cwd
    check(where.startswith("/usr/lib/python3/dist-packages/"), f"package: import vmtune gives the package's ({where})")
    check(HOOK.is_symlink() and os.readlink(HOOK) == "/usr/lib/vmtune/libvirt-hook",
          f"package: the hook is the package's ({HOOK} -> {os.readlink(HOOK) if HOOK.is_symlink() else None})")
    version = virsh("version")
    print(version.replace("\n", "; "), flush=True)
    lib = next((ln.split()[-1] for ln in version.splitlines() if "libvirt" in ln and "library" in ln.lower()), "0")
    check(int(lib.split(".")[0]) >= 10, f"package: libvirt {lib} (at least 10)")
    define("lat-a", "latency")
    define("plain-b", None)
    print("tag: " + virsh("metadata", "lat-a", "https://vmtune.dev/xmlns/1").replace("\n", " "), flush=True)
    proc = subprocess.run(["vmtune", "apply", "lat-a"], capture_output=True, text=True, check=False)
    check(proc.returncode == 0 and "older vmtune" not in proc.stderr,
          f"package: vmtune apply of a domain just tagged, whose own XML has <memballoon model='none'/>, says "
          f"nothing of an older vmtune ({proc.returncode}: {proc.stderr.strip()[-300:]})")
    check(bool(pins("lat-a")), f"package: vmtune apply pinned lat-a's vCPUs ({pins('lat-a')})")


def case_start(before: dict) -> None:
    start("lat-a")
    held = held_checks("lat-a", "start")
    start("plain-b")
    check(state("plain-b") == "running" and "plain-b" not in leases(), "untagged: plain-b starts beside the lease, and takes none")
    destroy("plain-b")
    destroy("lat-a")
    check(until(lambda: "lat-a" not in leases(), 20, "destroy: the lease goes"), "destroy: the lease goes")
    given_back(before, "destroy")
    del held


def case_killed(before: dict) -> None:
    start("lat-a")
    held_checks("lat-a", "killed")
    os.kill(qemu_pid("lat-a"), signal.SIGKILL)
    until(lambda: state("lat-a") == "shut off", 60, "killed: libvirt sees QEMU gone")
    check(until(lambda: "lat-a" not in leases(), 30, "killed: the lease goes"), "killed: the lease goes")
    given_back(before, "killed")


def case_restart(before: dict) -> None:
    start("lat-a")
    held = held_checks("lat-a", "restart")
    sh("systemctl", "daemon-reload")
    check(cpus(read(ISOLATED) or "") >= held and read(partition_group("lat-a") / "cpuset.cpus.partition") == "isolated",
          f"daemon-reload: the partition stays (cpuset.cpus.isolated {read(ISOLATED)!r})")
    sh("systemctl", "restart", "libvirtd")
    until(lambda: subprocess.run(["virsh", "-c", URI, "version"], capture_output=True).returncode == 0, 60,
          "restart: libvirtd answers again")
    lease = leases().get("lat-a")
    check(lease is not None and cpus(lease["cpus"]) == held and state("lat-a") == "running",
          f"restart: the lease stays, on {held} ({lease and lease['cpus']})")
    destroy("lat-a")
    check(until(lambda: "lat-a" not in leases(), 20, "restart: the lease goes"), "restart: the lease goes at the destroy")
    given_back(before, "restart")


def case_managedsave(before: dict) -> None:
    start("lat-a")
    held = held_checks("lat-a", "managedsave")
    virsh("managedsave", "lat-a")
    until(lambda: state("lat-a") == "shut off", 90, "managedsave: lat-a saved")
    check("lat-a" not in leases(), "managedsave: the lease goes with the save")
    given_back(before, "managedsave")
    start("lat-a")
    again = held_checks("lat-a", "managedsave, then start")
    check(again == held, f"managedsave: the lease comes back on the same CPUs ({again} == {held})")
    destroy("lat-a")
    virsh("managedsave-remove", "lat-a", check_rc=False)
    given_back(before, "managedsave, then destroy")


def case_saverestore(before: dict) -> None:
    """``virsh save``, then ``virsh restore``: the lease goes with the save and comes back with the
    restore (the hook's ``restore`` filter, then prepare and started), on the same CPUs."""
    image = Path("/tmp/lat-a.save")
    image.unlink(missing_ok=True)
    start("lat-a")
    held = held_checks("lat-a", "save")
    virsh("save", "lat-a", str(image))
    until(lambda: state("lat-a") == "shut off", 90, "save: lat-a saved")
    check(until(lambda: "lat-a" not in leases(), 20, "save: the lease goes"), "save: the lease goes with the save")
    given_back(before, "save")
    virsh("restore", str(image))
    until(lambda: state("lat-a") == "running" and qemu_pid("lat-a") > 0, 90, "restore: lat-a runs")
    again = held_checks("lat-a", "restore")
    check(again == held, f"restore: the lease comes back on the same CPUs ({again} == {held})")
    destroy("lat-a")
    image.unlink(missing_ok=True)
    given_back(before, "save, restore, then destroy")


def case_partition(before: dict) -> None:
    """``[hook] isolate = "partition"`` set in the config: the same partition, given back the same."""
    config = Path("/etc/vmtune/vmtune.toml")
    made = not config.parent.exists()
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[hook]\nisolate = "partition"\n')
    try:
        start("lat-a")
        held_checks("lat-a", "isolate = partition")
        destroy("lat-a")
        check(until(lambda: not leases(), 20, "isolate = partition: the lease goes"), "isolate = partition: the lease goes")
        given_back(before, "isolate = partition")
    finally:
        config.unlink(missing_ok=True)
        if made:
            config.parent.rmdir()  # as the package left it: the administrator's folder, not the package's


def case_three(before: dict) -> None:
    define("lat-c", "latency")
    define("thr-d", "throughput")
    vmtune("apply", "lat-a", "lat-c", "thr-d")
    for name in ("lat-a", "lat-c", "thr-d"):
        start(name)
    held_a, held_c = held_checks("lat-a", "three"), held_checks("lat-c", "three")
    check(bool(held_a) and bool(held_c) and not held_a & held_c, f"three: no CPU held twice ({held_a}, {held_c})")
    got = vcpu_threads(qemu_pid("thr-d"))
    check(bool(got) and not set().union(*got.values()) & (held_a | held_c),
          f"three: thr-d's vCPU threads run off the held CPUs ({got})")
    check("thr-d" not in leases(), "three: the throughput domain takes no lease")
    for name in ("thr-d", "lat-c", "lat-a"):
        destroy(name)
    check(until(lambda: not leases(), 20, "three: every lease goes"), "three: every lease goes")
    given_back(before, "three")


def case_migrate(before: dict) -> None:
    """An incoming migration as the hook sees it: the ``migrate`` filter gets lat-a's XML pinned as the
    source host had it, on the CPUs lat-c holds here, and re-pins it off them; libvirt then starts it
    (prepare, started) on the new pins."""
    from lxml import etree

    start("lat-c")
    held_c = held_checks("lat-c", "migrate")
    root = etree.fromstring(virsh("dumpxml", "--inactive", "--migratable", "lat-a").encode())
    for pin in root.iterfind("cputune/*"):
        if pin.tag in ("vcpupin", "emulatorpin"):
            pin.set("cpuset", ",".join(map(str, sorted(held_c))))
    incoming = etree.tostring(root, encoding="unicode")
    proc = subprocess.run([str(HOOK), "lat-a", "migrate", "begin", "-"], input=incoming, capture_output=True,
                          text=True, check=False)
    check(proc.returncode == 0, f"migrate: the hook's filter exits 0 ({proc.returncode}: {proc.stderr.strip()[-300:]})")
    out = etree.fromstring((proc.stdout or incoming).encode())
    moved = set().union(*(cpus(p.get("cpuset")) for p in out.iterfind("cputune/vcpupin")))
    check(bool(proc.stdout) and bool(moved) and not moved & held_c,
          f"migrate: the filter re-pins lat-a off lat-c's CPUs {held_c} (to {moved})")
    Path("/tmp/lat-a.in.xml").write_text(proc.stdout or incoming)
    virsh("define", "/tmp/lat-a.in.xml")
    start("lat-a")
    held_a = held_checks("lat-a", "migrate, then started here")
    check(held_a == moved and not held_a & held_c, f"migrate: lat-a's lease is on the new pins ({held_a})")
    destroy("lat-a")
    destroy("lat-c")
    check(until(lambda: not leases(), 20, "migrate: every lease goes"), "migrate: every lease goes")
    given_back(before, "migrate")


IMAGE = Path("/var/lib/libvirt/images/io-e.img")


def case_iothreads(before: dict) -> None:
    """libvirt 11 with QEMU 10: ``vmtune apply`` maps a virtio disk's queues over several iothreads
    (the versions from the connection), and QEMU starts with them (``virsh iothreadinfo``)."""
    from lxml import etree

    IMAGE.parent.mkdir(parents=True, exist_ok=True)
    with open(IMAGE, "wb") as fh:
        fh.truncate(1 << 20)
    disk = (f"<disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='{IMAGE}'/>"
            "<target dev='vda' bus='virtio'/></disk>")
    path = Path("/tmp/io-e.xml")
    path.write_text(DOMAIN.format(name="io-e", vcpus=2, mib=48).replace("<devices>", f"<devices>{disk}"))
    virsh("define", str(path))
    vmtune("tag", "io-e", "--profile", "throughput")
    vmtune("apply", "io-e")
    root = etree.fromstring(virsh("dumpxml", "--inactive", "io-e").encode())
    ids = [int(e.get("id")) for e in root.iterfind("devices/disk/driver/iothreads/iothread")]
    check(len(ids) >= 2 and root.find("devices/disk/driver").get("iothread") is None,
          f"iothreads: vmtune apply maps io-e's disk queues over iothreads {ids}")
    start("io-e")
    info = virsh("iothreadinfo", "io-e")
    running = [line.split()[0] for line in info.splitlines() if line.strip() and line.split()[0].isdigit()]
    check(set(map(str, ids)) <= set(running), f"iothreads: QEMU runs iothreads {running} (virsh iothreadinfo)")
    destroy("io-e")
    virsh("undefine", "io-e", check_rc=False)
    IMAGE.unlink(missing_ok=True)
    given_back(before, "iothreads")


def case_judge(before: dict) -> None:
    if CORPUS is None:
        print("judge: no --corpus given", flush=True)
        return
    proc = subprocess.run(["/usr/bin/python3", str(Path(__file__).with_name("libvirt_judge.py")), str(CORPUS)],
                          cwd="/", capture_output=True, text=True, check=False)
    print("\n".join(f"judge: {line}" for line in proc.stdout.splitlines() if not line.startswith("ok: ")), flush=True)
    judged = [line for line in proc.stdout.splitlines() if line.startswith(("ok: ", "FAIL: "))]
    mapped = [line for line in judged if "queues mapped" in line]
    check(bool(mapped), f"judge: {len(mapped)} outputs for this libvirt map a disk's queues over several iothreads")
    check(proc.returncode == 0 and "\n0 failed" in proc.stdout and len(judged) > 50,
          f"judge: libvirt defines and its domain.rng validates every output it can judge ({len(judged)} "
          f"domain-profile pairs; exit {proc.returncode}{': ' + proc.stderr.strip()[-300:] if proc.returncode else ''})")


def case_purge(before: dict) -> None:
    start("lat-a")
    held_checks("lat-a", "purge")
    proc = subprocess.run(["apt-get", "purge", "-y", "-q", "vmtune"], capture_output=True, text=True,
                          env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    check(proc.returncode == 0, f"purge: apt-get purge vmtune ({proc.returncode}: {proc.stderr.strip()[-300:]})")
    check(not HOOK.exists() and not HOOK.is_symlink(), "purge: the hook is gone")
    left = sorted(str(p) for p in STATE.rglob("*")) if STATE.exists() else []
    check(not left, f"purge: nothing left in {STATE} ({left})")
    check(not Path("/etc/vmtune").exists(), "purge: /etc/vmtune is gone")
    check(state("lat-a") == "running", "purge: the domain runs on")
    destroy("lat-a")
    given_back(before, "purge (the host given back at the purge)")
    start("plain-b")
    start("lat-a")
    check(state("plain-b") == "running" and state("lat-a") == "running", "purge: domains still start")
    destroy("plain-b")
    destroy("lat-a")


CASES = {"package": case_package, "start": case_start, "killed": case_killed, "restart": case_restart,
         "managedsave": case_managedsave, "saverestore": case_saverestore, "partition": case_partition,
         "three": case_three, "migrate": case_migrate, "iothreads": case_iothreads,
         "judge": case_judge, "purge": case_purge}
CORPUS: Path | None = None


def tidy() -> None:
    """After a case: no domain runs (a case that failed half-way leaves none to the next)."""
    for name in virsh("list", "--name", check_rc=False).split():
        destroy(name)
    until(lambda: not leases(), 30, "every lease gone after a case")


def _names(value: str) -> set[str]:
    """``--only``'s cases: names of CASES, comma-separated, "package" among them."""
    names = {name.strip() for name in value.split(",") if name.strip()}
    unknown = sorted(names - set(CASES))
    if unknown:
        raise argparse.ArgumentTypeError(f"no case {', '.join(unknown)} (the cases: {', '.join(CASES)})")
    if "package" not in names:
        raise argparse.ArgumentTypeError("package goes first: it defines the domains the other cases start")
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--case", choices=list(CASES), help="run the cases up to this one")
    which.add_argument("--only", metavar="A,B", type=_names, help="run these cases, in the scenario's order")
    parser.add_argument("--corpus", type=Path, help="the shared corpus (its domains/), for the judge")
    args = parser.parse_args()
    if not GUEST.is_dir():  # it purges packages and kills QEMU: never on the machine that runs the suite
        parser.error(f"runs inside scripts/cgroup2-guest --libvirt (no {GUEST} here)")
    global CORPUS
    CORPUS = args.corpus
    names = list(CASES) if args.case is None else list(CASES)[:list(CASES).index(args.case) + 1]
    if args.only:
        names = [name for name in CASES if name in args.only]
    before = base.snapshot(skip())
    for name in names:
        t0 = time.monotonic()
        try:
            CASES[name]() if name == "package" else CASES[name](before)
        except Exception as exc:  # one case's surprise is a failed check; the next cases still run
            check(False, f"{name}: {type(exc).__name__}: {exc}")
            try:
                tidy()
            except Exception as again:  # noqa: BLE001 - said, and the next case goes on
                print(f"tidy after {name}: {again}", flush=True)
        print(f"case {name}: {time.monotonic() - t0:.1f} s", flush=True)
    print(f"{len(base.failures)} failed", flush=True)
    return min(len(base.failures), 100)


if __name__ == "__main__":
    sys.exit(main())
