"""libvirt 11 as a judge of vmtune's outputs, inside ``scripts/cgroup2-guest --libvirt``.

Run as root in the guest by its /usr/bin/python3, with vmtune from its .deb and the shared corpus
at its path (``--share CORPUS``); ``tests/test_cgroup2_guest.py`` runs it. For every corpus domain
vmtune tunes (kvm ones as type='qemu': the guest has no /dev/kvm) and every built-in profile, the
output, rewritten for the bundled example host:

- validates against this libvirt's own ``domain.rng``, where the input does;
- twice: for a libvirt of unknown version (the conservative form) and for this one (its version,
  from the connection: a disk's queues over several iothreads on libvirt 10 with QEMU 9);
- is defined by the test driver (``test:///default``) and by ``qemu:///system``, where the input
  is (a domain this libvirt refuses untouched is counted and named, not judged).

Prints ``ok: ...`` or ``FAIL: ...`` per domain and profile, then the counts; exits with the number
of failures. ``CORPUS`` is the folder holding ``domains/``; the checkout's examples (``examples/*.xml``,
shared at its path) are judged too, on its example host.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import libvirt
from lxml import etree

import vmtune
from vmtune.errors import DoesNotFit, VmtuneError
from vmtune.live import hostview

SCHEMA = Path("/usr/share/libvirt/schemas/domain.rng")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"  # the checkout's, not the package's
PROFILES = ("balanced", "latency", "realtime", "throughput")


def as_qemu(xml: bytes) -> bytes:
    root = etree.fromstring(xml)
    root.set("type", "qemu")
    return etree.tostring(root)


def defines(conn: libvirt.virConnect, xml: str) -> str | None:
    """None when ``conn`` defines ``xml`` (then undefined again), else libvirt's message."""
    try:
        dom = conn.defineXML(xml)
    except libvirt.libvirtError as exc:
        return str(exc).splitlines()[0]
    dom.undefine()
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path)
    args = parser.parse_args()
    libvirt.registerErrorHandler(lambda *_: None, None)
    schema = etree.RelaxNG(etree.parse(str(SCHEMA)))
    host = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
    paths = sorted((args.corpus / "domains").glob("*.xml")) + sorted(EXAMPLES.glob("*.xml"))
    conns = {"test:///default": libvirt.open("test:///default"), "qemu:///system": libvirt.open("qemu:///system")}
    hosts = {"offline": host, "this libvirt": hostview.with_versions(host, conns["qemu:///system"])}
    failures, counts = 0, {"judged": 0, "refused by vmtune": 0, "does not fit": 0, "input refused": 0}
    for path in paths:
        source = as_qemu(path.read_bytes())
        refused = {uri: defines(conn, source.decode()) for uri, conn in conns.items()}
        valid = schema.validate(etree.fromstring(source))
        if not valid:
            print(f"input: {path.name} is not valid for this libvirt's domain.rng", flush=True)
        for uri, why in refused.items():
            if why is not None:
                print(f"input: {uri} refuses {path.name} untouched: {why}", flush=True)
        for (which, target), profile in ((h, p) for h in hosts.items() for p in PROFILES):
            try:
                out = vmtune.rewrite(source, target, profile).xml
            except DoesNotFit:
                counts["does not fit"] += 1
                continue
            except VmtuneError:
                counts["refused by vmtune"] += 1
                continue
            tree = etree.fromstring(out.encode())
            mapped = tree.find("devices/disk/driver/iothreads") is not None
            what = f"{path.name} {profile} ({which}{', queues mapped' if mapped else ''})"
            problems = []
            if valid and not schema.validate(tree):
                problems.append(f"domain.rng: {schema.error_log.last_error}")
            for uri, conn in conns.items():
                if refused[uri] is not None:
                    counts["input refused"] += 1
                    continue
                why = defines(conn, out)
                if why is not None:
                    problems.append(f"{uri}: {why}")
            counts["judged"] += 1
            print(("ok: " if not problems else "FAIL: ") + what + ("" if not problems else f" ({'; '.join(problems)})"),
                  flush=True)
            failures += bool(problems)
    print(f"libvirt {libvirt.getVersion() // 1000000}.{libvirt.getVersion() // 1000 % 1000}: "
          + ", ".join(f"{n} {k}" for k, n in counts.items()), flush=True)
    print(f"{failures} failed", flush=True)
    return min(failures, 100)


if __name__ == "__main__":
    sys.exit(main())
