"""The ``guest-disk-queues`` case (issue 35): one virtio-blk disk's queues over several iothreads.

vmtune maps a disk's queues over the domain's iothreads (``<driver queues='N'><iothreads>``) where
libvirt is 10.0 or newer and QEMU 9.0 or newer, and gives the disk one iothread elsewhere
(vmtune/passes/iothreads.py). This case boots the benchmark's guest (bench/guestimage.py) with 2
vCPUs twice, with the disk as vmtune writes it for each kind of host (the ``throughput`` profile,
the connection's versions and versions older than those), and has the guest read its disk from each
vCPU at once (``vmb.tests=diskpar``: one ``disklat`` pinned to each vCPU, so that each of blk-mq's
per-CPU queues carries reads). It records each vCPU's read latency and, sampled from QEMU's threads
while the guest runs, the CPU time of each ``IO iothreadN`` thread.

Under TCG the latencies measure the emulation, not the disk: the case reports **function** (both
iothreads exist, ``virsh iothreadinfo`` lists them, and each carried reads when the queues are
mapped; one did all of it with one iothread). It needs root, libvirt ≥ 10.0 and QEMU ≥ 9.0 on
``qemu:///system`` (``Unavailable`` says which is missing): on this project's machines that is
``scripts/cgroup2-guest --libvirt``, given the host's image through ``--share`` (``--manifest``)::

    .venv/bin/python -m bench.disk_queues --manifest /var/lib/libvirt/images/vmtune-bench/manifest.json
    scripts/cgroup2-guest --libvirt --share /var/lib/libvirt/images/vmtune-bench -- \\
        /bin/sh -c 'cd $PWD && VMTUNE_BENCH_MANIFEST=/var/lib/libvirt/images/vmtune-bench/manifest.json \\
        python3 -m bench --part disk-queues --out /tmp/dq && cat /tmp/dq/*.json'
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from lxml import etree

import vmtune
from vmtune.passes.iothreads import QUEUE_MAPPING

from . import guestimage, guests
from .common import summarize

CASE = "guest-disk-queues"
NEEDS = QUEUE_MAPPING  # what vmtune/passes/iothreads.py maps a disk's queues from
OLDER = {"libvirt": (9, 0, 0), "qemu": (7, 2, 0)}  # a host without the mapping: one iothread for the disk
VCPUS = 2
SIZES = {"full": {"disk_ops": 1000, "warmup": 50, "timeout_s": 1800},
         "quick": {"disk_ops": 200, "warmup": 10, "timeout_s": 1200},
         "smoke": {"disk_ops": 100, "warmup": 10, "timeout_s": 1200}}
LOCAL = Path("/var/lib/libvirt/images/vmtune-bench-dq")  # the guest's files on a local file system
DISK_MIB = 64


class Unavailable(Exception):
    """The case cannot run on this host (the message says why)."""


class DiskQueuesError(RuntimeError):
    """A guest did not boot, did not read, or a variant is not what vmtune writes."""


def parse_versions(text: str) -> dict[str, tuple[int, ...]]:
    """libvirt's and QEMU's versions from ``virsh version``."""
    found = {}
    for key, pattern in (("libvirt", r"Using library: libvirt (\d+(?:\.\d+)*)"),
                         ("qemu", r"Running hypervisor: QEMU (\d+(?:\.\d+)*)")):
        m = re.search(pattern, text)
        if m:
            found[key] = tuple(int(x) for x in m.group(1).split("."))
    return found


def _dotted(v: tuple[int, ...]) -> str:
    return ".".join(map(str, v))


def preflight() -> dict[str, tuple[int, ...]]:
    """The connection's versions; Unavailable unless root, virsh, libvirt ≥ 10.0 and QEMU ≥ 9.0."""
    if os.geteuid() != 0:
        raise Unavailable("needs root (it starts guests through the system libvirtd)")
    if shutil.which("virsh") is None:
        raise Unavailable("virsh is not installed")
    proc = subprocess.run(["virsh", "-c", guests.URI, "version"], capture_output=True, text=True, check=False)
    have = parse_versions(proc.stdout)
    if proc.returncode or set(have) != set(NEEDS):
        raise Unavailable(f"no libvirt and QEMU versions from {guests.URI}: {(proc.stderr or proc.stdout).strip()[-300:]}")
    short = [f"{k} {_dotted(have[k])} (needs {_dotted(NEEDS[k])})" for k in NEEDS if have[k] < NEEDS[k]]
    if short:
        raise Unavailable(f"mapping a disk's queues over iothreads needs libvirt >= 10.0 and QEMU >= 9.0: {', '.join(short)}; "
                          "scripts/cgroup2-guest --libvirt has libvirt 11.3 and QEMU 10 (bench/disk_queues.py)")
    return have


def variant_xmls(stock: str, host: vmtune.Host, have: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """The two variants, each as vmtune writes it: for this host's versions (``queues-mapped``) and for
    a host older than the mapping (``one-iothread``). DiskQueuesError where vmtune did not write that."""
    out = {}
    for variant, versions in (("one-iothread", OLDER), ("queues-mapped", have)):
        cfg = vmtune.Config(libvirt_version=versions["libvirt"], qemu_version=versions["qemu"])
        xml = vmtune.rewrite(stock, host, "throughput", config=cfg).xml
        driver = etree.fromstring(xml.encode()).find("devices/disk/driver")
        mapped = driver is not None and driver.find("iothreads") is not None
        if mapped != (variant == "queues-mapped") or driver is None or \
                (not mapped and driver.get("iothread") is None):
            raise DiskQueuesError(f"{variant}: vmtune wrote {etree.tostring(driver).decode() if driver is not None else 'no <driver>'}")
        out[variant] = xml
    return out


def _image() -> guestimage.Image:
    """The benchmark's guest, built here; or the one a manifest names (``$VMTUNE_BENCH_MANIFEST``,
    written by ``--manifest`` on a host that can build it), copied to a local file system."""
    manifest = os.environ.get("VMTUNE_BENCH_MANIFEST")
    if not manifest:
        return guestimage.build()
    data = json.loads(Path(manifest).read_text())
    LOCAL.mkdir(parents=True, exist_ok=True)
    LOCAL.chmod(0o755)
    paths = {}
    for key in ("kernel", "kernel.pvh", "initrd", "echo_server"):  # the unpacked kernel after the kernel: newer
        src = Path(data["kernel"] + ".pvh" if key == "kernel.pvh" else data[key])
        dst = LOCAL / src.name
        if src.exists() and (not dst.exists() or dst.stat().st_size != src.stat().st_size):
            shutil.copyfile(src, dst)
            dst.chmod(0o644)
        paths[key] = dst
    return guestimage.Image(paths["kernel"], paths["initrd"], data["kernel_package"], paths["echo_server"], data["key"])


def write_manifest(path: Path) -> guestimage.Image:
    """Build the image here and say where it is (the kernel unpacked for its PVH entry too)."""
    image = guestimage.build()
    guestimage.debimage.pvh_kernel(image.kernel)
    path.write_text(json.dumps({"kernel": str(image.kernel), "initrd": str(image.initrd), "key": image.key,
                                "kernel_package": image.kernel_package, "echo_server": str(image.echo_server)}))
    return image


def _iothread_cpu(name: str) -> dict[str, float]:
    """CPU seconds of each of the domain's ``IO iothreadN`` threads (libvirt names them: debug-threads=on)."""
    try:
        pid = int((Path("/run/libvirt/qemu") / f"{name}.pid").read_text().strip())
    except (OSError, ValueError):
        return {}
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            comm = (task / "comm").read_text().strip()
            if re.fullmatch(r"IO iothread\d+", comm):  # not QEMU's own monitor thread, "IO mon_iothread"
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                out[comm[3:]] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
    return out


def _boot(xml: str, image: guestimage.Image, cfg: dict, variant: str) -> dict:
    cmdline = f"vmb.tests=diskpar vmb.disk_ops={cfg['disk_ops']} vmb.warmup={cfg['warmup']}"
    with guests.running(xml, image, cmdline, f"dq-{variant}") as g:
        info = guests.virsh("iothreadinfo", g.name, check=False)
        cpu: dict[str, float] = {}
        deadline = time.monotonic() + cfg["timeout_s"]
        while True:  # QEMU's threads sampled until the guest has read and powers off
            cpu = _iothread_cpu(g.name) or cpu
            text = g.text()
            if guestimage.DONE in text or time.monotonic() > deadline:
                break
            state = guests.virsh("domstate", g.name, check=False).strip()
            if state and state != "running":
                break
            time.sleep(0.5)
        parsed = g.wait(guestimage.DONE, 5)
        parsed["boot_s"] = (g.up_at or time.monotonic()) - g.started
    parsed["iothreads_listed"] = sorted(int(m) for m in re.findall(r"^\s*(\d+)\s", info, re.M))
    parsed["iothread_cpu_s"] = cpu
    return parsed


def _function(variant: str, parsed: dict) -> tuple[bool, str]:
    """Whether the variant did what it is for, and in words."""
    reads = {k: v for k, v in parsed["results"].items() if k.startswith("diskq")}
    errors = sum(int(float(v.get("errors", 1))) for v in reads.values())
    busy = sorted(k for k, v in parsed["iothread_cpu_s"].items() if v > 0)
    want = 2 if variant == "queues-mapped" else 1
    ok = len(reads) == VCPUS and errors == 0 and len(parsed["iothreads_listed"]) == want and len(busy) == want
    return ok, (f"{len(reads)} vCPUs read ({errors} errors); virsh iothreadinfo lists {parsed['iothreads_listed']}; "
                f"iothreads that did work: {busy or 'none'} (CPU s {parsed['iothread_cpu_s']})")


def run(size: str, log) -> list[dict]:
    have = preflight()
    cfg = SIZES[size]
    host = vmtune.Host.from_sysfs()
    disk = LOCAL / "disk.raw"
    LOCAL.mkdir(parents=True, exist_ok=True)
    guests.disk_image(disk, DISK_MIB)
    stock = guests.stock_domain("qemu", disk, None, vcpus=VCPUS)
    xmls = variant_xmls(stock, host, have)
    image = _image()
    log(f"disk-queues: libvirt {_dotted(have['libvirt'])}, QEMU {_dotted(have['qemu'])}; guest image {image.key}")
    records = []
    failed = []
    for variant, xml in xmls.items():
        parsed = _boot(xml, image, cfg, variant)
        ok, words = _function(variant, parsed)
        log(f"disk-queues: {variant}: boot {parsed['boot_s']:.0f}s; {words}")
        if not ok:
            failed.append(f"{variant}: {words}")
        per = [{"p50_us": float(v["p50_us"]), "p99_us": float(v["p99_us"]), "n": int(float(v["n"])), "vcpu": k}
               for k, v in sorted(parsed["results"].items()) if k.startswith("diskq")]
        s = summarize([{"p50_ms": r["p50_us"] / 1e3, "p99_ms": r["p99_us"] / 1e3} for r in per], ("p50_ms", "p99_ms")) \
            if per else {"p50_ms": {"median": None}, "p99_ms": {"median": None}}
        records.append({
            "case": CASE, "variant": variant, "virt_type": "qemu",
            "virt_type_note": "TCG: the latencies measure the emulation, not the disk; the case reports function",
            "p50_ms": s["p50_ms"]["median"], "p99_ms": s["p99_ms"]["median"], "spread": s, "runs": 1,
            "per_run": per, "function": {"ok": ok, "what": words}, "boot_s": parsed["boot_s"],
            "iothreads_listed": parsed["iothreads_listed"], "iothread_cpu_s": parsed["iothread_cpu_s"],
            "versions": {k: _dotted(v) for k, v in have.items()}, "facts": parsed["facts"],
        })
    if failed:
        raise DiskQueuesError("; ".join(failed))
    return records


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="build the benchmark's guest image here and write its manifest")
    ap.add_argument("--manifest", type=Path, required=True)
    built = write_manifest(ap.parse_args().manifest)
    print(f"{built.kernel} {built.initrd}", file=sys.stderr)
