"""The benchmark guest: Debian's generic kernel and an initramfs with the measuring programs.

``build()`` returns an ``Image`` (kernel, initrd, the programs, the host-side echo server), built
once and cached under CACHE_DIR (world-readable, so the qemu process can open them). The kernel is
the generic ``linux-image-amd64``: it has e1000 and ata_piix/ahci as modules, which the stock
variant's emulated NIC and disk need (the cloud kernel that tests/fixtures/guest.py uses lacks them). The
packages are fetched with ``apt-get download`` and unpacked with ``dpkg-deb``: nothing is installed
and no maintainer script runs. The package holds no modules.dep, so the modules' dependencies are
read from their ``.modinfo`` sections.

The C programs in bench/guest/ are built with ``gcc -static -O2`` and cached by the hash of their
sources and the compiler version. The guest's /init reads ``vmb.*`` parameters from the kernel
command line, prints on the serial console::

    VMB-UP
    VMB-FACT nproc=1 cpu_model=... clocksource=tsc disk=vda disk_driver=virtio_blk nic=eth0 nic_driver=virtio_net
    VMB-RESULT disk n=2000 p50_us=... p99_us=... ...      (one line per test: disk, net, timer;
                                                           diskpar: diskq0, diskq1... one per vCPU)
    VMB-DONE

and powers off. ``vmb.tests=hog`` instead starts one busy loop per vCPU, prints ``VMB-HOG``, and
spins until the domain is destroyed.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import debimage
from .common import ROOT
from .debimage import BuildError  # noqa: F401 - part of this module's interface

CACHE_DIR = Path(os.environ.get("VMTUNE_BENCH_CACHE", "/var/lib/libvirt/images/vmtune-bench"))
SOURCES = ROOT / "bench" / "guest"
GUEST_PROGRAMS = ("disklat", "netlat", "timerlat")
HOST_PROGRAMS = ("udpecho",)
KERNEL_PACKAGE = "linux-image-amd64"
# The drivers the variants need (emulated and paravirtual); their dependencies are added.
MODULES = ("virtio_pci", "virtio_blk", "virtio_net", "virtio_balloon", "ata_piix", "ahci", "sd_mod", "e1000")
UP, DONE, HOG = "VMB-UP", "VMB-DONE", "VMB-HOG"

INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
for m in $(cat /lib/modules/order); do
    insmod /lib/modules/$m.ko 2>/dev/null || echo "VMB-WARN insmod $m failed"
done
tests=; disk_ops=1000; net_ops=1000; timer_ops=1000; warmup=50; ip=; host=; port=7777
for arg in $(cat /proc/cmdline); do
    case "$arg" in vmb.*=*) k=${arg%%=*}; k=${k#vmb.}; v=${arg#*=}; eval "$k=\$v";; esac
done
echo VMB-UP
if [ "$tests" = hog ]; then
    n=$(nproc)
    for i in $(seq "$n"); do (while :; do :; done) & done
    echo "VMB-HOG spinners=$n"
    while :; do sleep 3600; done
fi
dev=
case ",$tests," in *,disk,*|*,diskpar,*)
    for i in $(seq 150); do
        for d in vda sda; do [ -b /dev/$d ] && dev=$d && break 2; done
        sleep 0.2
    done;;
esac
case ",$tests," in *,net,*)
    for i in $(seq 150); do [ -e /sys/class/net/eth0 ] && break; sleep 0.2; done;;
esac
drv() { [ -e "$1" ] && basename "$(readlink "$1")"; }
echo "VMB-FACT nproc=$(nproc) clocksource=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)" \
     "disk=${dev:-none} disk_driver=$(drv /sys/block/$dev/device/driver)" \
     "nic_driver=$(drv /sys/class/net/eth0/device/driver) virtio=$(ls /sys/bus/virtio/devices 2>/dev/null | wc -l)" \
     "cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //; s/ /_/g')"
for t in $(echo "$tests" | tr , ' '); do
    case "$t" in
        disk) out=$(/bin/disklat /dev/$dev "$disk_ops" "$warmup" 2>&1);;
        diskpar) n=$(nproc); i=0  # one reader pinned to each vCPU at once: each of blk-mq's queues carries reads
            while [ "$i" -lt "$n" ]; do taskset -c "$i" /bin/disklat /dev/$dev "$disk_ops" "$warmup" >/tmp/dq$i 2>&1 & i=$((i+1)); done
            wait; i=0
            while [ "$i" -lt "$n" ]; do echo "VMB-RESULT $(sed "s/^disk /diskq$i /" /tmp/dq$i)"; i=$((i+1)); done
            continue;;
        net) ip link set lo up; ip link set eth0 up; ip addr add "$ip" dev eth0
             out=$(/bin/netlat "$host" "$port" "$net_ops" "$warmup" 2>&1);;
        timer) out=$(/bin/timerlat "$timer_ops" 2>&1);;
        *) out="$t error=unknown-test";;
    esac
    echo "VMB-RESULT $out"
done
echo VMB-DONE
poweroff -f
"""


@dataclass(frozen=True)
class Image:
    kernel: Path
    initrd: Path
    kernel_package: str
    echo_server: Path  # host side of the network case
    key: str


_run = debimage.run


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()[:12]


def ensure_static_gcc() -> None:
    """``gcc -static`` works, or install gcc and libc6-dev with apt-get (root), or BuildError."""
    def works() -> bool:
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "t.c"
            src.write_text("int main(void){return 0;}\n")
            return subprocess.run(["gcc", "-static", "-O2", "-o", str(Path(tmp) / "t"), str(src)],
                                  capture_output=True, check=False).returncode == 0 if shutil.which("gcc") else False
    if works():
        return
    if os.geteuid() != 0:
        raise BuildError("gcc -static does not work and installing gcc/libc6-dev needs root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "gcc", "libc6-dev"]):
        subprocess.run(cmd, capture_output=True, env=env, check=False)
    if not works():
        raise BuildError("gcc -static does not work, even after apt-get install gcc libc6-dev")


def programs(dest: Path) -> dict[str, Path]:
    """Build the guest programs (static) and the echo server into ``dest``; cached by source hash."""
    sources = sorted(SOURCES.glob("*.[ch]"))
    gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[:1]
    key = _digest(*(p.read_bytes() for p in sources), "\n".join(gcc).encode())
    out = dest / f"bin-{key}"
    names = GUEST_PROGRAMS + HOST_PROGRAMS
    if not all((out / n).exists() for n in names):
        ensure_static_gcc()
        tmp = Path(tempfile.mkdtemp(dir=dest))
        try:
            for n in names:
                _run("gcc", "-static", "-O2", "-Wall", "-o", str(tmp / n), str(SOURCES / f"{n}.c"))
            tmp.chmod(0o755)
            os.replace(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            if not out.exists():
                raise
    return {n: out / n for n in names}


def build() -> Image:
    """The cached image, built on first use (a lock keeps concurrent runs from building twice)."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    CACHE_DIR.chmod(0o755)
    with open(CACHE_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        progs = programs(CACHE_DIR)
        package = debimage.kernel_image_package(KERNEL_PACKAGE)
        key = _digest(INIT.encode(), " ".join(MODULES).encode(), package.encode(),
                      *(progs[n].read_bytes() for n in GUEST_PROGRAMS))
        kernel = CACHE_DIR / f"vmlinuz-{package}"
        initrd = CACHE_DIR / f"initrd-{key}.gz"
        if not (kernel.exists() and initrd.exists()):
            _build(package, kernel, initrd, progs)
            for old in CACHE_DIR.glob("initrd-*.gz"):
                if old != initrd:
                    old.unlink()
        for old in CACHE_DIR.glob("bin-*"):
            if old != progs["disklat"].parent:
                shutil.rmtree(old, ignore_errors=True)
    return Image(kernel, initrd, package, progs["udpecho"], key)


def _modname(path: str) -> str:
    return Path(path).name.removesuffix(".ko").replace("-", "_")


def modinfo(ko: bytes) -> dict[str, str]:
    """The key=value strings of a module's .modinfo section (found by their NUL separators)."""
    out: dict[str, str] = {}
    for key in ("depends", "softdep", "name"):
        m = re.search(rb"\0" + key.encode() + rb"=([^\0]*)\0", ko)
        if m:
            out[key] = m.group(1).decode(errors="replace")
    return out


def _modules(deb: Path, work: Path) -> list[tuple[str, bytes]]:
    """MODULES and everything they need, in load order (dependencies first)."""
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    paths = {}
    for line in listing.splitlines():
        path = line.split()[-1]
        if path.endswith(".ko"):
            paths[_modname(path)] = path
    data: dict[str, bytes] = {}
    deps: dict[str, list[str]] = {}
    todo = list(MODULES)
    while todo:
        batch = [m for m in dict.fromkeys(todo) if m not in data]
        todo = []
        missing = [m for m in batch if m not in paths]
        if missing:
            raise BuildError(f"{deb.name} has no module(s) {', '.join(missing)}")
        if not batch:
            break
        tree = debimage.extract(deb, work, *(paths[m] for m in batch))
        for m in batch:
            data[m] = (tree / paths[m]).read_bytes()
            info = modinfo(data[m])
            need = [d.replace("-", "_") for d in info.get("depends", "").split(",") if d]
            soft = info.get("softdep", "")
            pre = soft.split("pre:", 1)[1].split("post:", 1)[0].split() if "pre:" in soft else []
            need += [d.replace("-", "_") for d in pre if d.replace("-", "_") in paths]
            deps[m] = need
            todo += need
    order: list[str] = []

    def visit(m: str, seen: tuple[str, ...] = ()) -> None:
        if m in order or m in seen:
            return
        for d in deps[m]:
            visit(d, seen + (m,))
        order.append(m)

    for m in sorted(deps):
        visit(m)
    return [(m, data[m]) for m in order]


def _build(package: str, kernel: Path, initrd: Path, progs: dict[str, Path]) -> None:
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
        work = Path(tmp)
        work.chmod(0o755)  # apt-get download runs as _apt when it can
        _run("apt-get", "download", "-qq", package, "busybox-static", cwd=work)
        (deb,) = work.glob(f"{package}_*.deb")
        (bb_deb,) = work.glob("busybox-static_*.deb")
        boot = debimage.extract(deb, work, "./boot/vmlinuz-*")
        busybox = (debimage.extract(bb_deb, work, "./bin/busybox") / "bin/busybox").read_bytes()
        modules = _modules(deb, work)
        tmp_kernel = work / "vmlinuz"
        shutil.copyfile(next(boot.glob("boot/vmlinuz-*")), tmp_kernel)
        tmp_initrd = work / "initrd.gz"
        files = {f"bin/{n}": progs[n].read_bytes() for n in GUEST_PROGRAMS}
        tmp_initrd.write_bytes(gzip.compress(_initramfs(busybox, modules, files), compresslevel=6))
        for src, dst in ((tmp_kernel, kernel), (tmp_initrd, initrd)):
            src.chmod(0o644)
            os.replace(src, dst)


def _initramfs(busybox: bytes, modules: list[tuple[str, bytes]], files: dict[str, bytes]) -> bytes:
    """A cpio (newc) archive: /init, a static busybox, the modules in load order, the programs."""
    order = "".join(f"{m}\n" for m, _ in modules).encode()
    return debimage.cpio([
        *debimage.SKELETON,
        ("bin/busybox", 0o100755, busybox, 0),
        *((name, 0o100755, data, 0) for name, data in files.items()),
        ("lib/modules/order", 0o100644, order, 0),
        *((f"lib/modules/{m}.ko", 0o100644, ko, 0) for m, ko in modules),
        ("init", 0o100755, INIT.encode(), 0),
    ])


def parse_console(text: str) -> dict:
    """{"up": bool, "done": bool, "hog": bool, "facts": {...}, "results": {test: {...}}, "warnings": [...]}."""
    out: dict = {"up": False, "done": False, "hog": False, "facts": {}, "results": {}, "warnings": []}
    for raw in text.replace("\r", "").split("\n"):
        line = raw.strip()
        if line == UP:
            out["up"] = True
        elif line == DONE:
            out["done"] = True
        elif line.startswith(HOG):
            out["hog"] = True
        elif line.startswith("VMB-WARN "):
            out["warnings"].append(line[9:])
        elif line.startswith("VMB-FACT "):
            out["facts"].update(_kv(line[9:]))
        elif line.startswith("VMB-RESULT "):
            name, _, rest = line[11:].partition(" ")
            out["results"][name] = _kv(rest)
    return out


def _kv(text: str) -> dict:
    out: dict = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if not sep:
            continue
        try:
            out[key] = int(value) if re.fullmatch(r"-?\d+", value) else float(value) if re.fullmatch(
                r"-?\d+\.\d*", value) else value
        except ValueError:
            out[key] = value
    return out
