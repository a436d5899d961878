"""Helpers for tests against the real libvirtd (qemu:///system, TCG guests), via the virsh CLI.

Use the session fixture ``libvirtd`` (import it into the test module) before any helper::

    from libvirt_env import libvirtd, boot, define, minimal_domain, undefine  # noqa: F401

    def test_boots(libvirtd):
        assert guest.MARKER in boot(minimal_domain())

``define(xml) -> name`` renames the domain to a unique ``vmtune-test-...`` name (and drops its
uuid); ``undefine(name)`` destroys and undefines it. ``boot(xml)`` adds the test kernel, initrd,
cmdline and a file serial console, starts the guest, waits for the guest's DONE line (or for it
to stop), always cleans up, and returns the console text (``guest.parse_console`` reads it).
``started(xml, hold=N)`` is the context manager behind it, for looking at a running domain.
``private_bridge()`` makes a bridge of this test's own (no dnsmasq, no firewall, unlike libvirt's
'default' network, which a host may not be able to start) and removes it after.
``minimal_domain()`` builds a diskless type='qemu' domain to start from. virsh failures raise
VirshError whose message is virsh's stderr. Domains this process defined are removed at session
end regardless.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from lxml import etree

import guest
from bench import debimage
from fixtures.wait import wait_until

URI = "qemu:///system"
PREFIX = "vmtune-test-"
SETUP = Path(__file__).resolve().parent.parent / "scripts" / "setup-libvirt"
LOG_DIR = Path("/var/log/libvirt/qemu")
CMDLINE = "console=ttyS0 panic=-1 quiet"
_defined: set[str] = set()


class VirshError(RuntimeError):
    """A virsh command failed; str() is its stderr."""


@pytest.fixture(scope="session")
def libvirtd():
    """Start (or reuse) libvirtd via scripts/setup-libvirt; skip only when not root."""
    if os.geteuid() != 0:
        pytest.skip("libvirt integration tests need root (scripts/setup-libvirt installs and starts libvirtd)")
    proc = subprocess.run([str(SETUP)], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        pytest.fail(f"scripts/setup-libvirt failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    yield URI
    for name in list(_defined):
        undefine(name)


def virsh(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["virsh", "-q", "-c", URI, *args], capture_output=True, text=True)
    if check and proc.returncode:
        raise VirshError(proc.stderr.strip() or f"virsh {' '.join(args)} failed")
    return proc.stdout


def minimal_domain(
    extra: str = "", features: str = "", devices: str = "", vcpus: int = 1, memory_mib: int = 128
) -> str:
    """A diskless type='qemu' domain; ``extra`` goes inside <domain>, ``features`` inside
    <features> (after acpi and apic), ``devices`` inside <devices>."""
    return f"""<domain type='qemu'>
  <name>x</name>
  <memory unit='MiB'>{memory_mib}</memory>
  <vcpu>{vcpus}</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <features><acpi/><apic/>{features}</features>
  {extra}
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <memballoon model='none'/>
    {devices}
  </devices>
</domain>"""


def define(xml: str, name: str | None = None) -> str:
    """Define ``xml`` under ``name`` (default: a fresh unique one), without its uuid; return the name."""
    root = etree.fromstring(xml.encode())
    name = name or _unique_name()
    _child(root, "name").text = name
    for el in root.findall("uuid"):
        root.remove(el)
    proc = subprocess.run(
        ["virsh", "-q", "-c", URI, "define", "/dev/stdin"], input=etree.tostring(root), capture_output=True
    )
    if proc.returncode:
        raise VirshError(proc.stderr.decode(errors="replace").strip())
    _defined.add(name)
    return name


def undefine(name: str) -> None:
    """Destroy (if running) and undefine; never raises for a domain that is already gone."""
    virsh("destroy", name, check=False)
    virsh("undefine", name, "--nvram", "--managed-save", "--snapshots-metadata", check=False)
    _defined.discard(name)


def domstate(name: str) -> str:
    return virsh("domstate", name).strip()


def with_test_boot(xml: str, console_log: Path, cmdline: str = "") -> str:
    """``xml`` with the test kernel/initrd/cmdline and a single file-backed serial console."""
    kernel, initrd = guest.kernel_and_initrd()
    root = etree.fromstring(xml.encode())
    debimage.direct_boot(root, kernel, initrd, f"{CMDLINE} {cmdline}", console_log)
    return etree.tostring(root, encoding="unicode")


@dataclass
class Guest:
    name: str
    console_log: Path

    def console(self) -> str:
        return _read(self.console_log)

    def qemu_log(self) -> str:
        return _read(LOG_DIR / f"{self.name}.log")

    def wait(self, line: str = guest.DONE, timeout: float = 60) -> str:
        """Console text once ``line`` appears or the domain stops; TimeoutError otherwise."""
        def seen() -> tuple[str] | None:  # a tuple: an empty console of a stopped domain is an answer too
            text = self.console()
            if line in text.replace("\r", "").split("\n"):
                return (text,)
            if domstate(self.name) != "running":  # it may have printed ``line`` and stopped since the read
                return (self.console(),)
            return None

        return wait_until(seen, timeout, lambda: f"{self.name}: no {line}\n--- console:\n{self.console()}"
                          f"\n--- qemu log:\n{self.qemu_log()[-3000:]}", interval=0.2)[0]


@contextmanager
def started(xml: str, hold: int = 0) -> Iterator[Guest]:
    """Define and start a test guest from ``xml``; destroy and undefine it on exit.

    ``hold`` keeps the guest up that many seconds after it printed its facts (for inspecting a
    running domain: ``g.wait(guest.MARKER)`` then e.g. ``virsh("vcpupin", g.name)``).
    Raises VirshError if define or start fails.
    """
    name = _unique_name()
    g = Guest(name, LOG_DIR / f"{name}.console")
    try:
        define(with_test_boot(xml, g.console_log, f"vmtune.hold={hold}" if hold else ""), g.name)
        virsh("start", g.name)
        yield g
    finally:
        undefine(g.name)
        g.console_log.unlink(missing_ok=True)
        (LOG_DIR / f"{g.name}.log").unlink(missing_ok=True)


@contextmanager
def private_bridge() -> Iterator[str]:
    """A Linux bridge of this test's own, up, with no address: ``<interface type='bridge'>`` on it
    starts without libvirt's network driver. Removed on exit."""
    name = f"vmtt{uuid.uuid4().hex[:8]}"
    try:
        for cmd in (["ip", "link", "add", name, "type", "bridge"], ["ip", "link", "set", name, "up"]):
            run = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if run.returncode:
                raise VirshError(f"{' '.join(cmd)}: {run.stderr.strip()}")
        yield name
    finally:
        subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)


def boot(xml: str, timeout: float = 60) -> str:
    """Boot a test guest from ``xml`` to its DONE line (or until it stops); return the console.

    Raises VirshError if define/start fails, TimeoutError (with console and qemu log) on timeout.
    """
    with started(xml) as g:
        return g.wait(timeout=timeout)


def _unique_name() -> str:
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0].split("::")[-1]
    slug = re.sub(r"[^A-Za-z0-9]+", "-", test).strip("-")[:40]
    return f"{PREFIX}{slug + '-' if slug else ''}{uuid.uuid4().hex[:8]}"


def _child(root: etree._Element, tag: str) -> etree._Element:
    el = root.find(tag)
    return el if el is not None else etree.SubElement(root, tag)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
